import type { MachineSeen, Store } from '../store/store.js';

/**
 * Idle heartbeats kept in memory and written together (docs/failure-detection.md, "The
 * heartbeat"): a fleet of idle agents heartbeats thousands of times a second, and a commit for
 * each was most of the server's work (docs/throughput.md, "A fleet of agents"). The heartbeat
 * route records each heartbeat's arrival here; the control plane's `liveness` loop writes what
 * was recorded every 0.4 × heartbeatMs (jittered up to 0.48) in one statement per thousand
 * machines (`Store.machinesSeen`). The database, not this map, is what failure detection reads,
 * so a replica that never saw a machine's heartbeats judges it from the rows the others wrote.
 */
export class HeartbeatLiveness {
  private seen = new Map<string, MachineSeen>();

  /** A heartbeat from this machine arrived at `at`, answered with period `periodMs` (the latest one counts). */
  record(machineId: string, at: number, periodMs?: number): void {
    this.seen.set(machineId, periodMs === undefined ? { machineId, at } : { machineId, at, periodMs });
  }

  /** Writes what was recorded since the last flush; on failure it is kept for the next one. */
  async flush(store: Store, now: number): Promise<number> {
    if (this.seen.size === 0) return 0;
    const batch = this.seen;
    this.seen = new Map();
    try {
      return await store.machinesSeen({ seen: Array.from(batch.values()), now });
    } catch (err) {
      for (const [machineId, s] of batch) if (!((this.seen.get(machineId)?.at ?? -Infinity) >= s.at)) this.seen.set(machineId, s);
      throw err;
    }
  }
}
