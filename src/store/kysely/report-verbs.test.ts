import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { KyselyStore } from './kysely-store.js';

describe('machineReport', () => {
  let store: KyselyStore;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('an item that fails for another reason than staleness is refused alone; the rest of the report counts', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    const j = await store.jobSubmit({ definition: job([stage('x'), stage('y')]), source: null, now });
    const cluster = await store.schedulerSnapshot({ now, limitPerShape: 10 });
    const plan = { placements: cluster.queue.map((q) => ({ stageId: q.stageId, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })), pending: [] };
    const applied = (await store.planApply({ plan, now, leaseMs: 10_000 })).applied;
    const [x, y] = ['x', 'y'].map((n) => applied.find((a) => a.stageName === n)!);
    await store.machineReport({ machineId: m.id, started: [{ attemptId: x!.id, token: x!.token, pid: null }], completed: [], now, leaseMs: 10_000, jitter: () => 0 });
    // A fault only this outcome trips (a bug, a constraint): here, a trigger.
    await sql`create trigger boom before update on attempts when new.exit_code = 77 begin select raise(abort, 'boom'); end`.execute(store.db);
    const errors: string[] = [];
    const r = await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: y!.id, token: y!.token, pid: null }],
      completed: [{ attemptId: x!.id, token: x!.token, exitCode: 77, signal: null, reason: null, outputs: [] }],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
      onItemError: (id) => errors.push(id),
    });
    expect(r.started[0]!.result).toBe('ok');
    expect(r.completed[0]).toMatchObject({ result: 'refused', message: expect.stringMatching(/boom/) });
    expect(errors).toEqual([x!.id]);
    const stages = (await store.jobGet({ jobId: j.id }))!.stages;
    expect(stages.find((s) => s.name === 'y')!.state).toBe('running');
    expect(stages.find((s) => s.name === 'x')!.attempts[0]!.state).toBe('running');
  });
});
