import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface JobRepairSettings {
  /** Jobs unchanged this long are re-evaluated by the advancer. */
  repairAfterMs: number;
  repairIntervalMs: number;
  /** At most this many jobs moved a pass. */
  repairBatch: number;
  /** Jobs looked at a pass, in id order from where the last pass stopped (docs/failure-detection.md, "The safety net"). */
  repairScan: number;
}

/**
 * The safety net: jobs that have not moved for `repairAfterMs` are re-evaluated with the
 * advancer's rules, so none can wait forever. Its sweep over jobs goes on from one pass to the
 * next (the cursor lives here), so a pass costs the same whatever the backlog. Returns the ids
 * of the jobs it had to move; in a healthy system, none.
 */
export function jobRepair(store: Store, clock: Clock, s: JobRepairSettings): ReconcilerDuty<string[]> {
  /** Where the sweep stands: the last job id looked at, null to start over. */
  let cursor: string | null = null;
  return {
    name: 'repair',
    intervalMs: s.repairIntervalMs,
    async runOnce() {
      const r = await store.jobsRepair({ now: clock.now(), staleAfterMs: s.repairAfterMs, limit: s.repairBatch, scan: s.repairScan, after: cursor });
      cursor = r.next;
      return r.moved;
    },
  };
}
