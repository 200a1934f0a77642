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
  };
}
