import { RETRY_AFTER_SPREAD_MAX } from '../lib/retry-after.js';

/** Shed past this multiple of the budget: a fleet on its period sends the budget at most, give or take agents joining. */
const SHED_PAST = 1.5;

/** The period is counted in this many slices: the count over the last period is exact to one slice. */
const SLICES = 20;

/**
 * The heartbeat budget of one server (docs/failure-detection.md, "Shedding heartbeats past the
 * budget"): the heartbeats that reached it over the last period, against `maxHeartbeatsPerSecond`,
 * the rate the fleet's period is sized for. Past 1.5 times it, the heartbeat route sheds the idle
 * heartbeats of agents that honour Retry-After. Over a whole period, not a second: every agent on
 * its period heartbeats once in it, so a fleet that keeps to its periods is within the budget
 * whatever the waves within a period (agents registered together heartbeat together; a one-second
 * window shed their crests in a fleet at 0.35 cores, measured). Counted in twenty slices of the
 * period, in constant memory; a new period starts the count afresh.
 */
export class HeartbeatBudget {
  private readonly slices = new Array<number>(SLICES).fill(0);
  private periodMs = 0;
  private slice = -Infinity;
  private sum = 0;

  /** @param perSecond the budget; 0 or less: never past it (shedding off, as the period's growth is). */
  constructor(private readonly perSecond: number) {}

  /** A heartbeat arrived at `now` (ms), the period being `periodMs`; answers whether the server is past its budget with it. */
  arrive(now: number, periodMs: number): boolean {
    if (!(this.perSecond > 0)) return false;
    if (periodMs !== this.periodMs) {
      this.periodMs = periodMs;
      this.slices.fill(0);
      this.sum = 0;
      this.slice = -Infinity;
    }
    const slice = Math.floor((now * SLICES) / periodMs);
    // Slices the clock moved past are emptied (all of them after a silence of a period or more).
    for (let s = Math.max(this.slice + 1, slice - SLICES + 1); s <= slice; s++) {
      const at = ((s % SLICES) + SLICES) % SLICES;
      this.sum -= this.slices[at]!;
      this.slices[at] = 0;
    }
    if (slice > this.slice) this.slice = slice;
    this.slices[((this.slice % SLICES) + SLICES) % SLICES]!++;
    this.sum++;
    return this.sum > (SHED_PAST * this.perSecond * periodMs) / 1000;
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
