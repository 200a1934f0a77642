import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Store } from '../store/store.js';
import { reconcilerLoops, type ReconcilerLoops } from './reconciler-loops.js';
import { defaultServerConfig } from './server-config.js';

/** A store that answers the reconciler's questions with nothing to do, counting each, whose pruning always fails. */
function fakeStore() {
  const calls: Record<string, number> = {};
  const count =
    <T>(name: string, answer: T) =>
    async () => {
      calls[name] = (calls[name] ?? 0) + 1;
      return answer;
    };
  const store = {
    machinesReap: count('machinesReap', { machines: [], lostAttempts: [] }),
    attemptsReap: count('attemptsReap', { machines: [], lostAttempts: [] }),
    stagesPastQueueTimeout: count('stagesPastQueueTimeout', []),
    jobsRepair: count('jobsRepair', { moved: [], next: null }),
    jobsExpire: count('jobsExpire', { jobs: [], attempts: [], legacyDirs: [] }),
    outboxPrune: async () => {
      calls.outboxPrune = (calls.outboxPrune ?? 0) + 1;
      throw new Error('outbox table locked');
    },
    idempotencyPrune: count('idempotencyPrune', 0),
  };
  return { store: store as unknown as Store, calls };
}

describe('the reconciler: one loop per duty', () => {
  let loops: ReconcilerLoops | null = null;
  afterEach(async () => {
    if (loops) await Promise.all(Object.values(loops).map((l) => l.stop()));
    loops = null;
    vi.useRealTimers();
  });

  it('a duty that throws on every pass is logged under its name and stops no other duty, nor its own next pass', async () => {
    vi.useFakeTimers();
    const { store, calls } = fakeStore();
    const errors: { loop: string; err: unknown }[] = [];
    const now = 1_700_000_000_000;
    // Retention runs twice as often as the others: each loop keeps its own interval.
    const config = defaultServerConfig({ retentionIntervalMs: 500 });
    loops = reconcilerLoops({
      store,
      clock: { now: () => now },
      config,
      log: { info: () => {}, warn: () => {} },
      onError: (loop) => (err) => void errors.push({ loop, err }),
      random: () => 0.5,
      judgeFrom: () => now,
      removeLegacyDirs: async () => {},
    });
    for (const l of Object.values(loops)) l.start();
    // The first passes at start, then one a second (500 ms for retention), for 5 s.
    await vi.advanceTimersByTimeAsync(5000);
    expect(calls.outboxPrune).toBe(6);
    expect(errors).toHaveLength(6);
    expect(errors.every((e) => e.loop === 'pruning' && (e.err as Error).message === 'outbox table locked')).toBe(true);
    // The same pass of pruning did not reach the Idempotency-Keys: one duty's steps stay in order.
    expect(calls.idempotencyPrune).toBeUndefined();
    expect(calls.machinesReap).toBe(6);
    expect(calls.attemptsReap).toBe(6);
    expect(calls.stagesPastQueueTimeout).toBe(6);
    expect(calls.jobsRepair).toBe(6);
    expect(calls.jobsExpire).toBe(11);
  });

  it('judges nothing before judgeFrom (the restart grace)', async () => {
    const { store, calls } = fakeStore();
    let now = 1_700_000_000_000;
    const judgeFrom = now + 10_000;
    loops = reconcilerLoops({
      store,
      clock: { now: () => now },
      config: defaultServerConfig(),
      log: { info: () => {}, warn: () => {} },
      onError: () => (err) => {
        throw err;
      },
      random: () => 0.5,
      judgeFrom: () => judgeFrom,
      removeLegacyDirs: async () => {},
    });
    await loops.lostMachines.runOnce();
    await loops.retention.runOnce();
    expect(calls).toEqual({});
    now = judgeFrom;
    await loops.lostMachines.runOnce();
    await loops.retention.runOnce();
    expect(calls).toEqual({ machinesReap: 1, jobsExpire: 1 });
  });
});
