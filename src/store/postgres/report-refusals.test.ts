import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, reportStarted, reportSucceeded, stage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

/** The append lock's key (tx-context.ts, APPEND_LOCK_KEY): held here so that a report waits at its append. */
const APPEND_LOCK_KEY = '7355608001';

/**
 * What a report refused at its events' append met (docs/throughput.md, "Reports refused at their
 * append (branch `refusals`)"). PostgreSQL's reason "Canceled on identification as a pivot, during
 * conflict in checking" is the check every write makes first: whether another transaction has
 * already marked this one to fail (predicate.c, CheckForSerializableConflictIn). The append is the
 * report's first write after its last update, and the only one after it waits (the append lock),
 * so a report marked while it waits is refused there, whatever the append writes. Here the marks
 * come from a reader of the attempt it starts and a writer of the machine row it read, through the
 * real store on a fresh schema, while nothing holds a SIRead lock on `outbox`, `events` or `audit`.
 */
describe.skipIf(pgMissing)('a report refused at its append (PostgreSQL)', () => {
  let store: KyselyStore;
  let schema: string;
  const clients: pg.Client[] = [];
  const t0 = 1_700_000_000_000;
  beforeEach(async () => {
    store = await freshPostgresStore('refusals');
    schema = (await store.db.selectNoFrom((eb) => eb.fn<string>('current_schema', []).as('s')).executeTakeFirstOrThrow()).s;
  });
  afterEach(async () => {
    for (const c of clients.splice(0)) await c.end().catch(() => {});
    await store?.close();
  });

  /** A connection of the test's own, on the store's schema: its transactions are not the store's. */
  const connect = async () => {
    const c = new pg.Client({ connectionString: POSTGRES_URL });
    await c.connect();
    clients.push(c);
    await c.query(`set search_path to ${schema}`);
    return c;
  };
  /** `n` machines, and a one-stage job placed on each by one plan (their attempts `scheduled`, their ids neighbours). */
  const placedTogether = async (n: number, prefix = 'm') => {
    const placements = [];
    for (let i = 0; i < n; i++) {
      const m = await store.machineRegister({ ...cpuMachine(`${prefix}${i}`), now: t0 });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now: t0 });
      placements.push({ stageId: j.stages[0]!.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 });
    }
    const applied = (await store.planApply({ plan: { placements, pending: [] }, now: t0, leaseMs: 10_000 })).applied;
    return applied.map((a) => ({ machineId: a.machineId, jobId: a.jobId, attempt: { attemptId: a.id, token: a.token } }));
  };
  /**
   * The transactions of this schema's store waiting for the append lock: the lock is one for the
   * whole database, so other test files' stores (other schemas) may wait for it too; this store's
   * waiters are those that also hold a lock on one of this schema's relations (their writes').
   * Each with its running transaction's id, which its SIRead locks carry (a pool connection's pid
   * also names the locks kept from its earlier, committed transactions).
   */
  const waiters = async (c: pg.Client) =>
    (
      await c.query<{ pid: number; vxid: string }>(
        `select w.pid, v.virtualxid as vxid from pg_locks w
         join pg_locks v on v.pid = w.pid and v.locktype = 'virtualxid' and v.granted
         where w.locktype = 'advisory' and not w.granted
           and exists (select 1 from pg_locks r join pg_class cl on cl.oid = r.relation
                       where r.pid = w.pid and r.mode <> 'SIReadLock' and cl.relnamespace = $1::regnamespace)`,
        [schema],
      )
    ).rows;
  /** Until `n` of this store's transactions wait for the append lock (each report's reads and updates done). */
  const waitingAtAppend = async (c: pg.Client, n: number) => {
    for (let i = 0; i < 500; i++) {
      if ((await waiters(c)).length >= n) return;
      await new Promise((res) => setTimeout(res, 10));
    }
    throw new Error(`fewer than ${n} transactions reached their append`);
  };
  /** SIRead locks held in this schema, by relation: all of them, or (`waiting`) those of the transactions waiting at the append. */
  const sireadRelations = async (c: pg.Client, waiting = false) => {
    const vxids = waiting ? (await waiters(c)).map((w) => w.vxid) : null;
    return (
      await c.query<{ relname: string }>(
        `select distinct cl.relname from pg_locks l join pg_class cl on cl.oid = l.relation
         where l.mode = 'SIReadLock' and cl.relnamespace = $1::regnamespace
           and ($2::text[] is null or l.virtualtransaction = any($2::text[])) order by 1`,
        [schema, vxids],
      )
    ).rows.map((r) => r.relname);
  };
  const APPEND_TABLES = /^(outbox|events|audit)/;
  const stateOf = async (attemptId: string) =>
    (await store.db.selectFrom('attempts').select('state').where('id', '=', attemptId).executeTakeFirstOrThrow()).state;

  it('eight start reports of attempts placed together, all waiting at the append lock at once: none refused (main: one commits, every other is refused at its append, "during conflict in checking"), and they hold no predicate lock', async () => {
    const placed = await placedTogether(8);
    const holder = await connect();
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    statements.reset();
    const reports = placed.map((x) => reportStarted(store, { machineId: x.machineId, attempt: x.attempt, now: t0 + 1000 }));
    await waitingAtAppend(holder, placed.length);
    // SERIALIZABLE (main), each held page locks on attempts_pkey, jobs_pkey, stages_pkey... that the
    // others' updates added entries to: each the other's reader and writer. READ COMMITTED: none.
    expect(await sireadRelations(holder, true)).toEqual([]);
    await holder.query('commit');
    const results = await Promise.all(reports);
    for (const [i, r] of results.entries()) expect(r?.started).toEqual([{ attemptId: placed[i]!.attempt.attemptId, result: 'ok' }]);
    expect([...statements.snapshot().conflictReasons]).toEqual([]);
    for (const x of placed) expect(await stateOf(x.attempt.attemptId)).toBe('running');
    expect(store.startsSerializable).toBe(0);
  }, 30_000);

  it('a completion (SERIALIZABLE as before), marked while it waits for the append lock by a reader of its attempt and a writer of its machine row: refused at the append, "during conflict in checking", with no SIRead lock on outbox, events or audit', async () => {
    const [x] = await placedTogether(1);
    await reportStarted(store, { machineId: x!.machineId, attempt: x!.attempt, now: t0 + 500 });
    const reader = await connect();
    const holder = await connect();
    const writer = await connect();
    // What the loop's plan does on this machine (planApply reads the attempts it holds), in a
    // SERIALIZABLE transaction left open: the report's update of the attempt is read by it.
    await reader.query('start transaction isolation level serializable');
    await reader.query('select id from attempts where machine_id = $1 and released_at is null', [x!.machineId]);
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    statements.reset();
    const report = reportSucceeded(store, { machineId: x!.machineId, attempt: x!.attempt, now: t0 + 1000 });
    await waitingAtAppend(holder, 1);
    // Nothing reads the append's tables under SERIALIZABLE: no lock on them to conflict with.
    expect((await sireadRelations(holder)).filter((r) => APPEND_TABLES.test(r))).toEqual([]);
    // A SERIALIZABLE writer of a row the report read (its machine's), committed first: the report
    // now has a reader after it and a writer before it, and this commit marks it (the pivot).
    await writer.query('start transaction isolation level serializable');
    await writer.query('update machines set labels = labels where id = $1', [x!.machineId]);
    await writer.query('commit');
    await holder.query('commit');
    const r = await report;
    await reader.query('commit');
    // Run again (tx()), the report is not a pivot any more: completed once.
    expect(r?.completed).toMatchObject([{ attemptId: x!.attempt.attemptId, result: 'ok' }]);
    const reasons = [...statements.snapshot().conflictReasons];
    expect(reasons).toHaveLength(1);
    const [[where, n]] = reasons as [[string, number]];
    expect(n).toBe(1);
    expect(where).toMatch(/^(insert into "events"|with o as \(insert into "outbox")/);
    expect(where).toContain('Canceled on identification as a pivot, during conflict in checking.');
    expect(await stateOf(x!.attempt.attemptId)).toBe('succeeded');
  }, 30_000);

  it('a cancel beside a start READ COMMITTED: the start waiting at its append (its rows written), the cancel waits, runs again and ends the running attempt; a cancel first leaves the start stale', async () => {
    const [first, second] = await placedTogether(2, 'c');
    const holder = await connect();
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    const start = reportStarted(store, { machineId: first!.machineId, attempt: first!.attempt, now: t0 + 1000 });
    await waitingAtAppend(holder, 1);
    const cancel = store.jobCancel({ jobId: first!.jobId, now: t0 + 1000, reason: 'test' });
    // The cancel waits for the start's row (or for the append lock); either way not before the start commits.
    await new Promise((res) => setTimeout(res, 200));
    await holder.query('commit');
    expect((await start)?.started).toEqual([{ attemptId: first!.attempt.attemptId, result: 'ok' }]);
    expect((await cancel).changed).toBe(true);
    expect(await stateOf(first!.attempt.attemptId)).toBe('canceled');
    // The other order: canceled first, the start finds its attempt no longer scheduled and changes nothing.
    await store.jobCancel({ jobId: second!.jobId, now: t0 + 1000, reason: 'test' });
    const late = await reportStarted(store, { machineId: second!.machineId, attempt: second!.attempt, now: t0 + 1100 });
    expect(late?.started).toMatchObject([{ attemptId: second!.attempt.attemptId, result: 'stale' }]);
    expect(await stateOf(second!.attempt.attemptId)).toBe('canceled');
  }, 30_000);

  it('a report with more than starts its guards keep right (a pid, a repeat) runs SERIALIZABLE, as before', async () => {
    const [x, y] = await placedTogether(2, 'p');
    // A pid is known before the transaction: SERIALIZABLE at once, no READ COMMITTED try.
    const r = await store.machineReport({
      machineId: x!.machineId,
      started: [{ ...x!.attempt, pid: 42 }],
      completed: [],
      now: t0 + 1000,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    expect(r.started).toEqual([{ attemptId: x!.attempt.attemptId, result: 'ok' }]);
    expect(store.startsSerializable).toBe(0);
    // Started twice: the repeat finds its attempt running, not scheduled, and runs again SERIALIZABLE, answered as before.
    await reportStarted(store, { machineId: y!.machineId, attempt: y!.attempt, now: t0 + 1000 });
    const again = await reportStarted(store, { machineId: y!.machineId, attempt: y!.attempt, now: t0 + 1100 });
    expect(again?.started).toEqual([{ attemptId: y!.attempt.attemptId, result: 'duplicate' }]);
    expect(store.startsSerializable).toBe(1);
  }, 30_000);
  // The two below were found in review (thirty-third session): both fail with the READ COMMITTED
  // try as first merged, and pass on the SERIALIZABLE report before it.
  it('a start READ COMMITTED beside a sibling stage failing SERIALIZABLE: the job stays what its stages say (running), never scheduled with a stage running', async () => {
    const m0 = await store.machineRegister({ ...cpuMachine('s0'), now: t0 });
    const m1 = await store.machineRegister({ ...cpuMachine('s1'), now: t0 });
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b')]), source: null, now: t0 });
    const [sa, sb] = j.stages;
    const placements = [
      { stageId: sa!.id, machineId: m0.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 },
      { stageId: sb!.id, machineId: m1.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 },
    ];
    const applied = (await store.planApply({ plan: { placements, pending: [] }, now: t0, leaseMs: 10_000 })).applied;
    const a = applied.find((x) => x.machineId === m0.id)!;
    const b = applied.find((x) => x.machineId === m1.id)!;
    await reportStarted(store, { machineId: m1.id, attempt: { attemptId: b.id, token: b.token }, now: t0 + 100 });
    const holder = await connect();
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    // b fails with retries left (SERIALIZABLE): it read stage a `scheduled`, wrote the job from that, and waits at its append.
    const fail = store.machineReport({
      machineId: m1.id,
      started: [],
      completed: [{ attemptId: b.id, token: b.token, exitCode: 1, signal: null, end: { kind: 'exited', detail: null }, outputs: [] }],
      now: t0 + 1000,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    await waitingAtAppend(holder, 1);
    // a is acknowledged (READ COMMITTED): it reads the job `running`, and now writes its row too.
    const start = reportStarted(store, { machineId: m0.id, attempt: { attemptId: a.id, token: a.token }, now: t0 + 1000 });
    await new Promise((res) => setTimeout(res, 300));
    await holder.query('commit');
    await Promise.all([fail, start]);
    const stages = await store.db.selectFrom('stages').select(['name', 'state']).where('job_id', '=', j.id).orderBy('name').execute();
    const jobRow = await store.db.selectFrom('jobs').select('state').where('id', '=', j.id).executeTakeFirstOrThrow();
    expect(stages.find((x) => x.name === 'a')!.state).toBe('running');
    expect(jobRow.state).toBe('running');
  }, 30_000);

  it('an acknowledgement resent while its first copy waits at the append answers duplicate, not stale (a stale one makes the agent drop a running attempt)', async () => {
    const [x] = await placedTogether(1, 'r');
    const holder = await connect();
    await holder.query('begin');
    await holder.query(`select pg_advisory_xact_lock(${APPEND_LOCK_KEY})`);
    const first = reportStarted(store, { machineId: x!.machineId, attempt: x!.attempt, now: t0 + 1000 });
    await waitingAtAppend(holder, 1);
    const resent = reportStarted(store, { machineId: x!.machineId, attempt: x!.attempt, now: t0 + 1100 });
    await new Promise((res) => setTimeout(res, 300));
    await holder.query('commit');
    const [f, r] = await Promise.all([first, resent]);
    expect(f?.started).toEqual([{ attemptId: x!.attempt.attemptId, result: 'ok' }]);
    expect(r?.started).toEqual([{ attemptId: x!.attempt.attemptId, result: 'duplicate' }]);
    expect(await stateOf(x!.attempt.attemptId)).toBe('running');
  }, 30_000);
});
