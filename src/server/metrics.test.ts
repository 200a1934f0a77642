import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AttemptEnd } from '../domain/attempt-end.js';
import { cpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { Metrics } from './metrics.js';

/** The counters that follow the event log: attempts ended, by outcome and by how they ended. */
describe('Metrics: attempts ended', () => {
  let store: Store;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  /** A one-stage job run on the machine to the end the agent reports. */
  const ended = async (machineId: string, end: AttemptEnd, exitCode: number | null) => {
    const j = await store.jobSubmit({
      definition: job([stage('a', { retry: { maxAttempts: 1, backoff: { initialSeconds: 1, maxSeconds: 1 }, onExitCodes: null, maxLost: 0 } })]),
      source: null,
      now,
    });
    const r = await store.planApply({
      plan: { placements: [{ stageId: j.stages[0]!.id, machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 20 }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    const a = r.applied[0]!;
    await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: 10_000 });
    await store.attemptComplete({ attemptId: a.id, token: a.token, exitCode, signal: exitCode === null ? 'SIGKILL' : null, end, outputs: [], now, jitter: 0 });
    return j.id;
  };
  const values = async (metrics: Metrics, name: string) =>
    Object.fromEntries((await metrics.registry.getSingleMetric(name)!.get()).values.map((v) => [Object.values(v.labels).join(','), v.value]));

  it('counts each end by its outcome and by its kind, so oom-killed is visible apart from the other failures', async () => {
    const m = await store.machineRegister({ ...cpuMachine('c1'), now });
    const metrics = new Metrics(store, () => now);
    // Counters start at the log's head: what ended before the process started is not counted.
    await ended(m.id, { kind: 'exited', detail: null }, 0);
    await metrics.start();
    await ended(m.id, { kind: 'exited', detail: null }, 0);
    await ended(m.id, { kind: 'oom-killed', detail: 'killed by its memory limit' }, null);
    await ended(m.id, { kind: 'oom-killed', detail: 'killed by its memory limit' }, null);
    await ended(m.id, { kind: 'exited', detail: null }, 3);
    const canceled = await store.jobSubmit({ definition: job([stage('b')]), source: null, now });
    const r = await store.planApply({
      plan: { placements: [{ stageId: canceled.stages[0]!.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 20 }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    await store.attemptStart({ attemptId: r.applied[0]!.id, token: r.applied[0]!.token, pid: 2, now, leaseMs: 10_000 });
    await store.jobCancel({ jobId: canceled.id, now, reason: 'canceled by user' });
    await metrics.catchUp();
    expect(await values(metrics, 'gantry_attempts_total')).toEqual({ succeeded: 1, failed: 3, canceled: 1 });
    expect(await values(metrics, 'gantry_attempt_ends_total')).toEqual({ exited: 2, 'oom-killed': 2, killed: 1 });
  });
});
