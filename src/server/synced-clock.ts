import type { Clock } from '../domain/clock.js';

/**
 * This process's clock, corrected to the database's (docs/store-contract.md, "One clock"): leases
 * and heartbeats written by one replica are judged by another, so all must read one time. Every
 * `intervalMs` it reads the database's clock and takes the offset at the middle of the round
 * trip (its error is at most half the round trip). Between readings it advances with the local
 * monotonic clock, so a step of the wall clock here (NTP) changes nothing until the next reading.
 *
 * A reading is taken only if its error bound is no worse than the offset's it would replace, grown
 * by the drift since (DRIFT_PER_MS), or is small anyway (GOOD_READING_MS): the filter NTP and
 * Cristian's algorithm apply, the shortest round trips trusted. Before, every reading was taken:
 * on a loaded host a round trip of seconds (the query queued for a connection, or the answer read
 * late by a busy event loop) put the clock up to half of it ahead of the database's, a replica so
 * far ahead found the leader's lease run out while it was being renewed on time, and judged every
 * machine seconds older than it was (10,000 agents on PostgreSQL × 2, branch `collapse`).
 */
export class SyncedClock implements Clock {
  private base = Date.now();
  private baseMono = performance.now();
  private timer: NodeJS.Timeout | null = null;
  /** The offset in use (database − local) and half the round trip of the reading it came from, for logs. */
  last: { offsetMs: number; errorMs: number } | null = null;
  /** The error bound of the reading in use, and when it was read (performance.now()). */
  private taken: { errorMs: number; at: number } | null = null;

  constructor(
    private readonly databaseNow: () => Promise<number>,
    private readonly intervalMs = 10_000,
    private readonly onError: (err: unknown) => void = () => {},
    /** Each reading left out (its error bound too wide), with the offset in use kept: for the logs. */
    private readonly onSkipped: (reading: SkippedReading) => void = () => {},
  ) {}

  now(): number {
    return Math.round(this.base + (performance.now() - this.baseMono));
  }

  async sync(): Promise<void> {
    const t0 = performance.now();
    const db = await this.databaseNow();
    const t1 = performance.now();
    const errorMs = (t1 - t0) / 2;
    // The database read its clock somewhere in [t0, t1]: take the middle, if the reading is no worse than the one in use.
    const base = db + errorMs;
    if (this.taken && errorMs > GOOD_READING_MS && errorMs > this.taken.errorMs + DRIFT_PER_MS * (t1 - this.taken.at)) {
      this.onSkipped({ errorMs, movesMs: Math.round(base - t1 - (this.base - this.baseMono)), inUse: { ...this.last! } });
      return;
    }
    this.base = base;
    this.baseMono = t1;
    this.taken = { errorMs, at: t1 };
    this.last = { offsetMs: Math.round(this.base - Date.now()), errorMs };
  }

  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(() => void this.sync().catch(this.onError), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

/** A reading SyncedClock left out: its error bound, how far it would have moved the clock (ms, + ahead), and the offset kept. */
export interface SkippedReading {
  errorMs: number;
  movesMs: number;
  inUse: { offsetMs: number; errorMs: number };
}

/** A reading with an error bound this small is taken whatever the one in use (a fast database answers in a few ms). */
export const GOOD_READING_MS = 25;
/** How fast two clocks may drift apart: 100 ppm, well above a quartz clock's, so a better reading is never refused for long. */
export const DRIFT_PER_MS = 1e-4;
