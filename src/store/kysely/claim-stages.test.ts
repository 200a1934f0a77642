import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { setBasedSqliteStore } from '../../../test/support/set-based-sqlite-store.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { skipUpdatesOf } from '../../../test/support/update-triggers.js';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { KyselyStore } from './kysely-store.js';

/**
 * A plan's stages are claimed set-based (claim-stages.ts): one guarded statement for all of them,
 * and each still placed only if it is still ready with the token read; on both stores.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();
const now = 1_700_000_000_000;

const dialects = [
  // SQLite writes one row a statement in the server (StoreCapabilities.setBasedWrites): both ways proven here.
  { name: 'sqlite', open: () => openSqliteStore(':memory:'), skip: false },
  { name: 'sqlite, set-based', open: setBasedSqliteStore, skip: false },
  { name: 'postgres', open: () => freshPostgresStore('claim_stages'), skip: missing !== null },
] as const;

describe.each(dialects)("a plan's stages claimed set-based ($name)", ({ name, open, skip }) => {
  let store: KyselyStore;
  afterEach(async () => {
    await store?.close();
  });

  /** Three ready stages of three jobs, and a plan placing them all on one machine. */
  const ready = async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    const jobs = [];
    for (const n of ['x', 'y', 'z']) jobs.push(await store.jobSubmit({ definition: job([stage('a')], { name: n }), source: null, now }));
    const queue = (await store.schedulerSnapshot({ now, limitPerShape: 10 })).queue;
    const placement = (stageId: string) => ({ stageId, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 });
    const stageIds = jobs.map((j) => queue.find((q) => q.jobId === j.id)!.stageId);
    return { m, jobs, stageIds, placement };
  };

  it.skipIf(skip)('places every stage in one statement, each with its token, attempt, event and job state', async () => {
    store = await open();
    const { jobs, stageIds, placement } = await ready();
    statements.reset();
    const r = await store.planApply({ plan: { placements: stageIds.map(placement), pending: [] }, now, leaseMs: 10_000 });
    expect(r.applied.map((a) => a.stageId)).toEqual(stageIds);
    expect(r.skipped).toEqual([]);
    if (name === 'postgres') {
      const updates = [...statements.snapshot().byText].filter(([t]) => t.startsWith('update "stages"')).reduce((n, [, c]) => n + c, 0);
      expect(updates).toBe(1);
    }
    for (const [i, j] of jobs.entries()) {
      const got = (await store.jobGet({ jobId: j.id }))!;
      expect(got.state).toBe('scheduled');
      expect(got.stages[0]!.state).toBe('scheduled');
      expect(got.stages[0]!.attempts.map((a) => [a.id, a.token, a.state])).toEqual([[r.applied[i]!.id, 1, 'scheduled']]);
      const events = await store.eventsList({ jobId: j.id, limit: 100 });
      expect(events.filter((e) => e.type === 'attempt:scheduled').map((e) => e.attemptId)).toEqual([r.applied[i]!.id]);
    }
  });

  it.skipIf(skip)('a stage named twice in a plan is placed once; one whose claim finds it changed is skipped with nothing written', async () => {
    store = await open();
    const { jobs, stageIds, placement } = await ready();
    const [x, y, z] = stageIds as [string, string, string];
    // y's row is passed over by the claim, as if it had moved since the plan's read.
    await skipUpdatesOf(store, name === 'postgres', 'stages', y);
    const r = await store.planApply({ plan: { placements: [placement(x), placement(y), placement(x), placement(z)], pending: [] }, now, leaseMs: 10_000 });
    expect(r.applied.map((a) => a.stageId)).toEqual([x, z]);
    expect(r.skipped.map((s) => [s.stageId, s.why]).sort()).toEqual(
      [
        [x, 'stage changed while placing'],
        [y, 'stage changed while placing'],
      ].sort(),
    );
    const got = (await store.jobGet({ jobId: jobs[1]!.id }))!;
    expect([got.state, got.stages[0]!.state, got.stages[0]!.attempts]).toEqual(['queued', 'ready', []]);
    expect((await store.eventsList({ jobId: jobs[1]!.id, limit: 100 })).map((e) => e.type)).not.toContain('attempt:scheduled');
    // The stage named twice has one attempt.
    expect((await store.jobGet({ jobId: jobs[0]!.id }))!.stages[0]!.attempts).toHaveLength(1);
  });
});
