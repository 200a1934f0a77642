import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import { planPlacements } from './plan-placements.js';

export interface SchedulerPassResult {
  placed: number;
  pending: number;
  skipped: number;
}

/**
 * One scheduling pass: read a snapshot, let the pure planner decide, apply the plan with
 * re-checks. The loop around it (server/loop.ts) runs it when a pool gets ready stages or
 * capacity frees up, and on an interval for backoffs that expired.
 */
export async function schedulerPass(
  store: Store,
  clock: Clock,
  opts: { leaseMs: number; limitPerPool?: number; maxPlacements?: number },
): Promise<SchedulerPassResult> {
  const now = clock.now();
  const snapshot = await store.schedulerSnapshot({ now, limitPerPool: opts.limitPerPool ?? 1000 });
  if (snapshot.queue.length === 0) return { placed: 0, pending: 0, skipped: 0 };
  const plan = planPlacements(snapshot, { maxPlacements: opts.maxPlacements ?? 1000 });
  const res = await store.planApply({ plan, now: clock.now(), leaseMs: opts.leaseMs });
  return { placed: res.applied.length, pending: plan.pending.length, skipped: res.skipped.length };
}
