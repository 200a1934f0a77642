import type { Clock } from '../domain/clock.js';
import type { ReapResult, Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface LostAttemptsSettings {
  ackTimeoutMs: number;
  lostAttemptsIntervalMs: number;
}

/**
 * Running attempts whose lease expired, and assignments never acknowledged within `ackTimeoutMs`,
 * are lost; their stages go back to the queue. A machine that is alive but dropped an attempt
 * (or never started it) is caught here, not by the lost-machines duty.
 */
export function lostAttempts(store: Store, clock: Clock, s: LostAttemptsSettings, random: () => number = Math.random): ReconcilerDuty<ReapResult> {
  return {
    name: 'lost-attempts',
    intervalMs: s.lostAttemptsIntervalMs,
    runOnce: () => store.attemptsReap({ now: clock.now(), ackTimeoutMs: s.ackTimeoutMs, jitter: random() }),
  };
}
