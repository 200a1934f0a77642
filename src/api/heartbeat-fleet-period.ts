import { fleetHeartbeatMs, type HeartbeatTimings, silenceAllowances } from '../domain/heartbeat-period.js';
import type { Store } from '../store/store.js';

/**
 * The heartbeat period this server gives agents now, grown with the fleet (domain/heartbeat-period.ts,
 * docs/failure-detection.md "A period that grows with the fleet"). The fleet is counted from the
 * database by every replica's liveness loop, so replicas give the same period within a loop's
 * pass. What a heartbeat's answer gives is recorded in the machine's row with its arrival; the
 * reaper judges each machine by that, not by this.
 */
export class HeartbeatFleetPeriod {
  private machines = 0;
  private periodMs: number;
  /** The longest period given lately, and when it last was: an agent told it may not have heard a shorter one yet. */
  private longest: { ms: number; at: number };

  constructor(private readonly t: HeartbeatTimings) {
    this.periodMs = t.heartbeatMs;
    this.longest = { ms: t.heartbeatMs, at: -Infinity };
  }

  /** Machines counted at the last refresh (not removed; not lost, or lately lost: Store.machinesHeartbeating). */
  get fleet(): number {
    return this.machines;
  }

  /** The period a heartbeat answered now gives. */
  get current(): number {
    return this.periodMs;
  }

  /** Counts the fleet again and grows (or shrinks) the period to it. */
  async refresh(store: Store, now: number): Promise<void> {
    this.set(await store.machinesHeartbeating({ now }), now);
  }

  /** The fleet is `machines` at `now` (refresh's second half; tests call it directly). */
  set(machines: number, now: number): void {
    this.machines = machines;
    this.periodMs = fleetHeartbeatMs(machines, this.t);
    // Every agent told the longest period has heard again within that period (and a round trip):
    // twice it, and a shorter one is what they are all on.
    if (this.periodMs >= this.longest.ms || now - this.longest.at > 2 * this.longest.ms) this.longest = { ms: this.periodMs, at: now };
  }

  /** The lease a heartbeat answered now writes: its agent's next heartbeat comes within the period it gives. */
  get heartbeatLeaseMs(): number {
    return silenceAllowances(this.periodMs, this.t).leaseMs;
  }

  /**
   * The lease an attempt's start writes: its machine's period is not known there (the report does
   * not read the row), so the longest any agent may still be on, renewed to its own by the
   * machine's next heartbeat.
   */
  get startLeaseMs(): number {
    return silenceAllowances(Math.max(this.periodMs, this.longest.ms), this.t).leaseMs;
  }
}
