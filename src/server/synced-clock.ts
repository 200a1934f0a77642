import type { Clock } from '../domain/clock.js';

/**
 * This process's clock, corrected to the database's (docs/store-contract.md, "One clock"): leases
 * and heartbeats written by one replica are judged by another, so all must read one time. Every
 * `intervalMs` it reads the database's clock and takes the offset at the middle of the round
 * trip (its error is at most half the round trip). Between readings it advances with the local
 * monotonic clock, so a step of the wall clock here (NTP) changes nothing until the next reading.
 */
export class SyncedClock implements Clock {
  private base = Date.now();
  private baseMono = performance.now();
  private timer: NodeJS.Timeout | null = null;
  /** The last measured offset (database − local) and half its round trip, for logs. */
  last: { offsetMs: number; errorMs: number } | null = null;

  constructor(
    private readonly databaseNow: () => Promise<number>,
    private readonly intervalMs = 10_000,
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  now(): number {
    return Math.round(this.base + (performance.now() - this.baseMono));
  }

  async sync(): Promise<void> {
    const t0 = performance.now();
    const db = await this.databaseNow();
    const t1 = performance.now();
    // The database read its clock somewhere in [t0, t1]: take the middle.
    this.base = db + (t1 - t0) / 2;
    this.baseMono = t1;
    this.last = { offsetMs: Math.round(this.base - Date.now()), errorMs: (t1 - t0) / 2 };
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
