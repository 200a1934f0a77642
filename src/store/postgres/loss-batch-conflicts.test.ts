import { CompiledQuery } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { schedulerPass } from '../../server/scheduler-pass.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, reportStarted, reportSucceeded, stage, startedOneStage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

/** The machine reaper's batch write (machine-verbs.ts, judgeMachines): one text a try of a batch. */
const MACHINES_WRITE = /^update "machines" set "health" = v\.column4/;
const sent = (re: RegExp) => [...statements.snapshot().byText].reduce((n, [text, k]) => n + (re.test(text) ? k : 0), 0);

/**
 * The reapers' loss batches READ COMMITTED (kysely-store.ts lossTx, loss-read-committed.ts;
 * docs/failure-detection.md, "A loss batch READ COMMITTED"): a batch no longer refused beside the
 * reports' passes, a loss no row lock can guard run SERIALIZABLE, and a lone loss left to the loop.
 */
describe.skipIf(pgMissing)('loss batches READ COMMITTED (PostgreSQL)', () => {
  let store: KyselyStore;
  const t0 = 1_700_000_000_000;
  const leaseMs = 10_000;
  const errors: unknown[] = [];
  beforeEach(async () => {
    store = await freshPostgresStore('loss_rc');
    errors.length = 0;
  });
  afterEach(async () => {
    await store?.close();
  });

  /** Machines, each running one stage placed and started at t0. */
  const rack = async (prefix: string, n: number, over: { cpuMillis?: number } = {}) => {
    const out: { id: string; jobId: string; a: { id: string; token: number } }[] = [];
    for (let i = 0; i < n; i++) {
      const m = await store.machineRegister({ ...cpuMachine(`${prefix}${i}`, over), now: t0 });
      const s = await startedOneStage(store, { machineId: m.id, now: t0, leaseMs });
      out.push({ id: m.id, jobId: s.jobId, a: s.a });
    }
    return out;
  };
  const reap = (now: number, heard?: (id: string) => number | undefined) =>
    store.machinesReap({ now, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0, ...(heard ? { heard } : {}) });
  const placeBeforeCommit = (now: () => number) =>
    store.placeBeforeCommit(
      (source) => schedulerPass(source, { now }, { leaseMs }).then(() => {}),
      (err) => errors.push(err),
    );
  const stageStates = async (jobId: string) => Object.fromEntries((await store.jobGet({ jobId }))!.stages.map((s) => [s.name, s.state]));

  it('a rack of 100 judged lost while 20 live machines report, each report placing the next queued stage before its commit: the batch sent once, every loss at the one pass', async () => {
    const dead = await rack('dead-', 100);
    // Room for one stage each: a report that ends its stage makes room its pass fills from the queue.
    const live = await rack('live-', 20, { cpuMillis: 1000 });
    const liveIds = new Set(live.map((m) => m.id));
    for (let i = 0; i < 80; i++) await store.jobSubmit({ definition: job([stage('q')]), source: null, now: t0 });
    const t1 = t0 + 11_000;
    placeBeforeCommit(() => t1);
    statements.reset();
    const rounds = 4;
    const [reaped] = await Promise.all([
      reap(t1, (id) => (liveIds.has(id) ? t1 : undefined)),
      ...live.map(async (m) => {
        let a: { attemptId: string; token: number } | undefined = { attemptId: m.a.id, token: m.a.token };
        for (let r = 0; r < rounds && a; r++) {
          await reportSucceeded(store, { machineId: m.id, attempt: a, now: t1 });
          const next = (await store.machineAssignments({ machineId: m.id }))[0];
          a = next ? { attemptId: next.attemptId, token: next.token } : undefined;
          if (a) await reportStarted(store, { machineId: m.id, attempt: a, now: t1 });
        }
      }),
    ]);
    // SERIALIZABLE, the batch's promoted reads made it the pivot between the reports' passes:
    // refused three times, split, its halves refused again.
    expect(sent(MACHINES_WRITE)).toBe(1);
    expect(reaped.deferred).toBeUndefined();
    expect(reaped.machines.filter((c) => c.to === 'lost').map((c) => c.machineId)).toEqual(dead.map((m) => m.id).sort());
    expect([...reaped.lostAttempts].sort()).toEqual(dead.map((m) => m.a.id).sort());
    const lostEvents = await store.db.selectFrom('events').select('attempt_id').where('type', '=', 'attempt:lost').execute();
    expect(lostEvents.map((e) => e.attempt_id).sort()).toEqual(dead.map((m) => m.a.id).sort());
    for (const m of live) expect((await store.machineGet({ machineId: m.id }))?.health).toBe('ready');
    // No machine over its capacity: one active attempt at most on each live machine (room for one).
    const active = await store.db
      .selectFrom('attempts')
      .select(['machine_id', (eb) => eb.fn.countAll<number>().as('n')])
      .where('state', 'in', ['scheduled', 'running'])
      .where('machine_id', 'in', [...liveIds])
      .groupBy('machine_id')
      .execute();
    for (const r of active) expect(Number(r.n)).toBeLessThanOrEqual(1);
    expect(errors).toEqual([]);
  }, 180_000);

  it("a lost stage beside another active stage of its job: the batch runs SERIALIZABLE, each attempt lost once, the other stage's attempt untouched", async () => {
    const [dead, live] = [await store.machineRegister({ ...cpuMachine('dead'), now: t0 }), await store.machineRegister({ ...cpuMachine('live'), now: t0 })];
    const plain = await startedOneStage(store, { machineId: dead.id, now: t0, leaseMs });
    // A fan-out: a and b independent, a on the machine that dies, b on the live one.
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b')]), source: null, now: t0 });
    const on = { a: dead.id, b: live.id } as Record<string, string>;
    const applied = (
      await store.planApply({
        plan: {
          placements: j.stages.map((s) => ({ stageId: s.id, machineId: on[s.name]!, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })),
          pending: [],
        },
        now: t0,
        leaseMs,
      })
    ).applied;
    for (const a of applied) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 7, now: t0, leaseMs });
    const a = applied.find((x) => x.stageName === 'a')!;
    const b = applied.find((x) => x.stageName === 'b')!;
    const t1 = t0 + 11_000;
    const r = await reap(t1, (id) => (id === live.id ? t1 : undefined));
    expect(store.lossesSerializable).toBe(1);
    expect([...r.lostAttempts].sort()).toEqual([plain.a.id, a.id].sort());
    expect(await stageStates(j.id)).toEqual({ a: 'ready', b: 'running' });
    expect((await store.db.selectFrom('attempts').select('state').where('id', '=', b.id).executeTakeFirstOrThrow()).state).toBe('running');
    const lostEvents = await store.db.selectFrom('events').select('attempt_id').where('type', '=', 'attempt:lost').execute();
    expect(lostEvents.map((e) => e.attempt_id).sort()).toEqual([plain.a.id, a.id].sort());
  });

  it('a lone lost machine: written READ COMMITTED, no pass before its commit, its stage left ready for the loop', async () => {
    const [dead] = await rack('dead-', 1);
    await store.machineRegister({ ...cpuMachine('live'), now: t0 + 10_500 });
    const t1 = t0 + 11_000;
    placeBeforeCommit(() => t1);
    const woke: string[] = [];
    store.onOutbox((ms) => {
      for (const m of ms) if (m.topic === 'pool:ready') woke.push(m.topic);
    });
    statements.reset();
    const r = await reap(t1);
    expect(r.lostAttempts).toEqual([dead!.a.id]);
    // SERIALIZABLE, with the pass before its commit, it was placed on the live machine in the loss's own transaction.
    expect(await stageStates(dead!.jobId)).toEqual({ a: 'ready' });
    expect(statements.snapshot().byText.get('start transaction isolation level read committed')).toBe(1);
    expect(woke.length).toBeGreaterThan(0);
    expect(errors).toEqual([]);
  });

  it('an attempt row a report holds as its lease runs out: the batch waits for no lock and goes SERIALIZABLE, so the report can still take its job row (no deadlock), and the attempt is lost once', async () => {
    const [m] = await rack('held-', 1);
    const deadlocks = async () =>
      Number(
        (await store.db.executeQuery<{ n: string }>(CompiledQuery.raw(`select deadlocks as n from pg_stat_database where datname = current_database()`)))
          .rows[0]!.n,
      );
    const before = await deadlocks();
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let jobLockedAfterMs = -1;
    // A report of the attempt: its row first, then (the job's state moving) its job's.
    const report = store.db.transaction().execute(async (trx) => {
      await trx.selectFrom('attempts').select('id').where('id', '=', m!.a.id).forUpdate().execute();
      await released;
      const t = performance.now();
      await trx.selectFrom('jobs').select('id').where('id', '=', m!.jobId).forUpdate().execute();
      jobLockedAfterMs = performance.now() - t;
    });
    const lost = reap(t0 + 11_000);
    // The batch has begun and met the held attempt row (it would hold the job's row by now).
    await new Promise((r) => setTimeout(r, 300));
    release();
    await report;
    await lost;
    expect(jobLockedAfterMs).toBeGreaterThanOrEqual(0);
    expect(jobLockedAfterMs).toBeLessThan(500);
    expect(await deadlocks()).toBe(before);
    expect((await store.attemptGet({ attemptId: m!.a.id }))?.state).toBe('lost');
  });

  it("cancels racing a rack's loss: a canceled job's stage is never readied, every other lost stage is, each attempt ended once", async () => {
    const dead = await rack('dead-', 40);
    const t1 = t0 + 11_000;
    const canceled = dead.filter((_, i) => i % 2 === 0);
    statements.reset();
    const [reaped, ...cancels] = await Promise.all([reap(t1), ...canceled.map((m) => store.jobCancel({ jobId: m.jobId, now: t1, reason: 'by test' }))]);
    expect(cancels.every((c) => c.changed)).toBe(true);
    const lost = new Set(reaped.lostAttempts);
    for (const m of dead) {
      const a = await store.db.selectFrom('attempts').select('state').where('id', '=', m.a.id).executeTakeFirstOrThrow();
      const states = await stageStates(m.jobId);
      if (canceled.includes(m)) {
        // Canceled whether the loss came first (then the cancel found the stage ready) or after.
        expect(states).toEqual({ a: 'canceled' });
        expect(a.state).toBe(lost.has(m.a.id) ? 'lost' : 'canceled');
      } else {
        expect(states).toEqual({ a: 'ready' });
        expect(a.state).toBe('lost');
      }
      const ends = await store.db
        .selectFrom('events')
        .select('type')
        .where('attempt_id', '=', m.a.id)
        .where('type', 'in', ['attempt:lost', 'attempt:canceled'])
        .execute();
      expect(ends).toHaveLength(1);
    }
    // No attempt placed for a canceled job's stage.
    const placed = await store.db
      .selectFrom('attempts')
      .select('id')
      .where(
        'job_id',
        'in',
        canceled.map((m) => m.jobId),
      )
      .where('state', 'in', ['scheduled', 'running'])
      .execute();
    expect(placed).toEqual([]);
  });
});
