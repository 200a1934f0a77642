import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import { planPlacements } from './plan-placements.js';

export interface SchedulerPassResult {
  placed: number;
  pending: number;
  parked: number;
  skipped: number;
}

/** Rounds in one pass: after parking unplaceable stages, the stages behind them are read at once. */
const MAX_ROUNDS = 10;

/**
 * One scheduling pass: read a snapshot, let the pure planner decide, apply the plan with
 * re-checks. When the plan parked stages no machine can run, the queue behind them is read again
 * at once (up to MAX_ROUNDS), so a wall of unplaceable work delays the rest by milliseconds, not
 * passes. The loop around it (server/loop.ts) runs it when a pool gets ready stages or capacity
 * frees up, and on an interval for backoffs that expired.
 */
export async function schedulerPass(
  store: Store,
  clock: Clock,
  opts: { leaseMs: number; limitPerPool?: number; maxPlacements?: number },
): Promise<SchedulerPassResult> {
  const total: SchedulerPassResult = { placed: 0, pending: 0, parked: 0, skipped: 0 };
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const snapshot = await store.schedulerSnapshot({ now: clock.now(), limitPerPool: opts.limitPerPool ?? 1000 });
    if (snapshot.queue.length === 0) break;
    const plan = planPlacements(snapshot, { maxPlacements: opts.maxPlacements ?? 1000 });
    const res = await store.planApply({ plan, now: clock.now(), leaseMs: opts.leaseMs, clusterVersion: snapshot.clusterVersion });
    const parked = plan.pending.filter((p) => p.unplaceable).length;
    total.placed += res.applied.length;
    total.skipped += res.skipped.length;
    total.parked += parked;
    total.pending = plan.pending.length - parked;
    if (parked === 0) break;
  }
  return total;
}
