import { RETRY_AFTER_SPREAD_MAX } from '../lib/retry-after.js';

/** Shed past this multiple of the budget: a fleet on its period sends about the budget, give or take its spread. */
const SHED_PAST = 1.25;

/**
 * The heartbeat budget of one server (docs/failure-detection.md, "Shedding heartbeats past the
 * budget"): the heartbeats that reached it over the last second, against `maxHeartbeatsPerSecond`,
 * the rate the fleet's period is sized for. Past 1.25 times it, the heartbeat route sheds the idle
 * heartbeats of agents that honour Retry-After. A sliding estimate in constant memory: this whole
 * second's count plus the previous one's, weighted by the part of it still within the last second.
 */
export class HeartbeatBudget {
  private second = -Infinity;
  private current = 0;
  private previous = 0;

  /** @param perSecond the budget; 0 or less: never past it (shedding off, as the period's growth is). */
  constructor(private readonly perSecond: number) {}

  /** A heartbeat arrived at `now` (ms); answers whether the server is past its budget with it. */
  arrive(now: number): boolean {
    if (!(this.perSecond > 0)) return false;
    const second = Math.floor(now / 1000);
    if (second !== this.second) {
      this.previous = second === this.second + 1 ? this.current : 0;
      this.current = 0;
      this.second = second;
    }
    this.current++;
    const estimate = this.current + this.previous * (1 - (now - second * 1000) / 1000);
    return estimate > SHED_PAST * this.perSecond;
  }
}

/**
 * What a shed heartbeat's answer says: come back after `retryAfterSeconds` (whole seconds, as
 * Retry-After is), and the period its arrival is recorded with: the longest the agent may wait
 * (lib/retry-after.ts: up to a quarter of the wait more, as jitter), never shorter than the period `periodMs`.
 */
export function shedAnswer(periodMs: number): { retryAfterSeconds: number; recordedPeriodMs: number } {
  const retryAfterSeconds = Math.max(1, Math.ceil(periodMs / 1000));
  return { retryAfterSeconds, recordedPeriodMs: Math.max(periodMs, Math.ceil(RETRY_AFTER_SPREAD_MAX * retryAfterSeconds * 1000)) };
}
