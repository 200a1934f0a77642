import type { MachineSeen, Store } from '../store/store.js';

/**
 * Idle heartbeats kept in memory and written together (docs/failure-detection.md, "The
 * heartbeat"): a fleet of idle agents heartbeats thousands of times a second, and a commit for
 * each was most of the server's work (docs/throughput.md, "A fleet of agents"). The heartbeat
 * route records each heartbeat's arrival here; the control plane's `liveness` loop writes what
 * was recorded every 0.4 × heartbeatMs (jittered up to 0.48) (`Store.machinesSeen`). The
 * database, not this map, is what failure detection reads, so a replica that never saw a
 * machine's heartbeats judges it from the rows the others wrote.
 */
/**
 * The flush's piece where one writer serialises every transaction (SQLite): about a millisecond of
 * writes and a commit, so no request waits behind a piece for long; 2,500 machines are ten pieces.
 */
export const SINGLE_WRITER_PIECE_ROWS = 256;

export class HeartbeatLiveness {
  private seen = new Map<string, MachineSeen>();

  /**
   * @param pieceRows machines a transaction of the flush writes at most, the pieces one after the
   * other, each its own transaction. Where one writer serialises every transaction on the event
   * loop's thread (SQLite: StoreCapabilities.singleWriter), a flush of 2,500 machines in one
   * transaction held every heartbeat and report behind it for its whole length (the slowest
   * heartbeats of a 10,000-agent fleet waited on it: docs/throughput.md, "What the slowest
   * heartbeats waited on"); in pieces, the requests that arrive meanwhile run between them.
   * Unbounded elsewhere (PostgreSQL: each transaction costs round trips, and other requests run
   * while it waits on them).
   */
  constructor(private readonly pieceRows = Infinity) {}

  /** A heartbeat from this machine arrived at `at`, answered with period `periodMs` (the latest one counts). */
  record(machineId: string, at: number, periodMs?: number): void {
    this.seen.set(machineId, periodMs === undefined ? { machineId, at } : { machineId, at, periodMs });
  }

  /**
   * Writes what was recorded since the last flush, in pieces of `pieceRows`; what a failed piece
   * and those after it held is kept for the next flush (unless a later arrival replaced it), and
   * the pieces before it stay written.
   */
  async flush(store: Store, now: number): Promise<number> {
    if (this.seen.size === 0) return 0;
    const batch = Array.from(this.seen.values());
    this.seen = new Map();
    let written = 0;
    let from = 0;
    try {
      for (; from < batch.length; from += this.pieceRows) written += await store.machinesSeen({ seen: batch.slice(from, from + this.pieceRows), now });
      return written;
    } catch (err) {
      for (let i = from; i < batch.length; i++) {
        const s = batch[i]!;
        if (!((this.seen.get(s.machineId)?.at ?? -Infinity) >= s.at)) this.seen.set(s.machineId, s);
      }
      throw err;
    }
  }
}
