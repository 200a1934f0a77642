import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { schedulerPass } from '../../server/scheduler-pass.js';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { cpuMachine, job, reportStarted, reportSucceeded, stage, startedOneStage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);

/**
 * The loop's plan applied in chunks on PostgreSQL (kysely-store.ts planApply, plan-chunks.ts;
 * docs/failure-detection.md, "Branch `placing`"): a plan of hundreds of placements placed
 * correctly beside the reports that commit while it runs (refused less often than whole, not bounded), a chunk's predicate locks kept on rows,
 * and a chunk refused for good leaving the chunks before it placed and the rest to the next pass.
 */
describe.skipIf(pgMissing)('the loop placing in chunks (PostgreSQL)', () => {
  let store: KyselyStore;
  const t0 = 1_700_000_000_000;
  const leaseMs = 10_000;
  const errors: unknown[] = [];
  beforeEach(async () => {
    store = await freshPostgresStore('placing');
    errors.length = 0;
  });
  afterEach(async () => {
    await store?.close();
  });

  const register = async (prefix: string, n: number, cpuMillis = 1000) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await store.machineRegister({ ...cpuMachine(`${prefix}${String(i).padStart(4, '0')}`, { cpuMillis }), now: t0 })).id);
    return ids;
  };
  /** `n` one-stage jobs, their stages ready, in submission order. */
  const queue = async (n: number) => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) ids.push((await store.jobSubmit({ definition: job([stage('s')]), source: null, now: t0 })).stages[0]!.id);
    return ids;
  };
  /** One placement a machine, stage i on machine i: what the loop's planner makes of a rack's stages readied at once. */
  const planOf = (stageIds: string[], machineIds: string[]): PlannedPlacement[] =>
    stageIds.map((stageId, i) => ({ stageId, machineId: machineIds[i]!, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }));
  /** Active attempts by machine, and how many attempts each stage has had. */
  const held = async () => {
    const rows = await store.db.selectFrom('attempts').select(['machine_id', 'stage_id', 'state']).execute();
    const active = new Map<string, number>();
    const perStage = new Map<string, number>();
    for (const r of rows) {
      if (r.state === 'scheduled' || r.state === 'running') active.set(r.machine_id, (active.get(r.machine_id) ?? 0) + 1);
      perStage.set(r.stage_id, (perStage.get(r.stage_id) ?? 0) + 1);
    }
    return { active, perStage };
  };

  it('a plan of 320 placements applied while 20 other machines report, each report placing before its commit: committed with few refusals, each stage placed once, no machine over its room', async () => {
    // 20 live machines with room for one stage each, each running one; 40 stages queued ahead for their reports' passes.
    const live = await register('live-', 20);
    const running = [];
    for (const id of live) running.push({ id, a: (await startedOneStage(store, { machineId: id, now: t0, leaseMs })).a });
    await queue(40);
    // A rack's worth of machines free and as many stages ready: the loop's plan places one on each.
    const big = await register('big-', 320);
    const planned = await queue(320);
    const t1 = t0 + 1000;
    store.placeBeforeCommit(
      (source) => schedulerPass(source, { now: () => t1 }, { leaseMs, maxPlacements: 1 }).then(() => {}),
      (err) => errors.push(err),
    );
    const rounds = 3;
    const [applied] = await Promise.all([
      store.planApply({ plan: { placements: planOf(planned, big), pending: [] }, now: t1, leaseMs }),
      ...running.map(async (m) => {
        let a: { attemptId: string; token: number } | undefined = { attemptId: m.a.id, token: m.a.token };
        for (let r = 0; r < rounds && a; r++) {
          await reportSucceeded(store, { machineId: m.id, attempt: a, now: t1 });
          const next = (await store.machineAssignments({ machineId: m.id }))[0];
          a = next ? { attemptId: next.attemptId, token: next.token } : undefined;
          if (a) await reportStarted(store, { machineId: m.id, attempt: a, now: t1 });
        }
      }),
    ]);
    // The refusals are not bounded here: one transaction for the whole plan (main) was refused 7,
    // 8 and 7 times in three runs, chunks read by index 5, 5 and 1 (the review's recount; a count
    // that matched only the machines' lock as a transaction's first statement missed every chunk
    // and read 0): fewer, but too close on a loaded host for a bound that cannot flake. What a chunk
    // holds is asserted below (no relation-level predicate lock); here, that the chunks place
    // correctly beside the reports, however often they are refused.
    // Every stage of the plan placed once, by the plan or by a report's pass, on a machine with room.
    const { active, perStage } = await held();
    for (const id of planned) expect(perStage.get(id) ?? 0).toBeLessThanOrEqual(1);
    for (const [, n] of active) expect(n).toBeLessThanOrEqual(1);
    expect(applied.applied.length + applied.skipped.length).toBe(320);
    expect(applied.applied.length).toBeGreaterThan(250);
    for (const s of applied.skipped) expect(s.why).toMatch(/no longer ready|no longer has room|changed while placing/);
    expect(errors).toEqual([]);
  }, 180_000);

  it('a chunk holds no lock on a whole relation where the whole plan did', async () => {
    // Attempts held elsewhere: an empty index is locked whole by any read of it (PostgreSQL's btree).
    for (const id of await register('busy-', 4)) await startedOneStage(store, { machineId: id, now: t0, leaseMs });
    const machines = await register('m-', 160);
    const planned = await queue(160);
    // SIRead locks outlive their transaction while one that overlapped it runs: a reader held open
    // keeps the plan's locks in pg_locks after its chunks commit.
    const reader = await store.db.connection().execute(async (c) => {
      await sql`start transaction isolation level serializable`.execute(c);
      await sql`select 1`.execute(c);
      const r = await store.planApply({ plan: { placements: planOf(planned, machines), pending: [] }, now: t0 + 1000, leaseMs });
      const locks = await sql<{ relname: string; n: number }>`
        select c.relname, count(*)::int as n from pg_locks l join pg_class c on c.oid = l.relation
        where l.mode = 'SIReadLock' and l.locktype = 'relation' and c.relnamespace = current_schema()::regnamespace
        group by c.relname`.execute(c);
      await sql`commit`.execute(c);
      return { applied: r.applied.length, relations: locks.rows.map((x) => x.relname) };
    });
    expect(reader.applied).toBe(160);
    // One transaction for the plan (main): locks on machines, stages, jobs and attempts whole, from
    // sequential scans and from more rows than max_pred_locks_per_relation. Chunks read by index.
    expect(reader.relations).toEqual([]);
  }, 60_000);

  it('a chunk refused for good (its leader deposed mid-plan): the chunks before it placed and correct, the rest placed by the next pass', async () => {
    const machines = await register('m-', 64);
    const planned = await queue(64);
    const t1 = t0 + 1000;
    const lease = await store.leaderClaim({ holder: 'r1', now: t1, ttlMs: 60_000 });
    // The term read before each transaction: the third finds another leader.
    let asked = 0;
    const fenced = store.asLeader(() => (++asked <= 2 ? { holder: 'r1', term: lease.term } : { holder: 'r1', term: lease.term - 1 }));
    await expect(fenced.planApply({ plan: { placements: planOf(planned, machines), pending: [] }, now: t1, leaseMs })).rejects.toMatchObject({
      name: 'NotLeaderError',
    });
    // Two chunks committed under the term: their 32 stages placed once each, one a machine.
    const first = await held();
    expect([...first.perStage.keys()].sort()).toEqual(planned.slice(0, 32).sort());
    for (const [, n] of first.active) expect(n).toBe(1);
    for (const id of planned.slice(32))
      expect((await store.db.selectFrom('stages').select('state').where('id', '=', id).executeTakeFirstOrThrow()).state).toBe('ready');
    // The next pass (the leader's own again) reads the queue and the room anew and places the rest.
    const next = await schedulerPass(
      store.asLeader(() => ({ holder: 'r1', term: lease.term })),
      { now: () => t1 + 10 },
      { leaseMs },
    );
    expect(next.placed).toBe(32);
    const after = await held();
    for (const id of planned) expect(after.perStage.get(id)).toBe(1);
    for (const [, n] of after.active) expect(n).toBe(1);
    expect(after.active.size).toBe(64);
  }, 60_000);
});
