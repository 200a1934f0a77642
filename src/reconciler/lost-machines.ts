import type { Clock } from '../domain/clock.js';
import type { HeardAt, ReapResult, Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface LostMachinesSettings {
  suspectAfterMs: number;
  lostAfterMs: number;
  lostMachinesIntervalMs: number;
  /** The configured heartbeat period: a machine told a longer one is allowed that much more silence (domain/heartbeat-period.ts). */
  heartbeatMs?: number;
}

/**
 * Machines silent past `suspectAfterMs` become suspect (nothing new is placed there); past
 * `lostAfterMs`, lost, with their attempts, whose stages go back to the queue in the same write.
 * Both grow for a machine on a period longer than `heartbeatMs` (docs/failure-detection.md, "A
 * period that grows with the fleet").
 */
export function lostMachines(
  store: Store,
  clock: Clock,
  s: LostMachinesSettings,
  random: () => number = Math.random,
  /** Arrivals this replica holds unwritten (HeartbeatLiveness.heardAt): a machine heard from is not judged silent. */
  heard?: HeardAt,
): ReconcilerDuty<ReapResult> {
  return {
    name: 'lost-machines',
    intervalMs: s.lostMachinesIntervalMs,
    runOnce: () =>
      store.machinesReap({
        now: clock.now(),
        suspectAfterMs: s.suspectAfterMs,
        lostAfterMs: s.lostAfterMs,
        jitter: random(),
        ...(s.heartbeatMs !== undefined ? { heartbeatMs: s.heartbeatMs } : {}),
        ...(heard ? { heard } : {}),
      }),
    // Aimed at the next loss a pass saw coming (docs/failure-detection.md, "Branch `massloss3`"): a
    // machine is read silent, and its loss's time known, from its suspect allowance on, seconds
    // before that loss. On the interval alone a pass came up to 1.2 intervals after a machine's
    // allowance ran out, and 1.2 intervals after the end of the pass before it: a rack's pass of
    // 300 losses took 1.4 s on PostgreSQL x 2, so its last machines waited 2.5 s and more.
    nextWithinMs: (r) => (r.lostDueAt === undefined ? undefined : Math.max(aimGapMs(s.lostMachinesIntervalMs), r.lostDueAt - clock.now())),
  };
}

/**
 * The least time between a pass and the next one aimed at a loss: a tenth of the interval (100 ms at
 * the defaults), so that losses falling due one after another are judged a few to a pass (batches,
 * reap-batches.ts) rather than a pass each, and a fleet where many live machines hover past their
 * suspect allowance costs at most ten reads of the silent machines a second, not a loop spinning.
 */
export function aimGapMs(intervalMs: number): number {
  return intervalMs / 10;
}
