/**
 * One machine's reports run their transactions one at a time, in the order they reached this
 * process (docs/throughput.md, "A machine's reports in turns"). Two reports of one machine in flight
 * at once (the agent's `--reports-in-flight 2`) both read the machine's row and its attempts, and
 * their passes before the commit place on the same machine: run side by side under SERIALIZABLE,
 * one in three of their transactions was refused and run again (measured on the throughput bench).
 * In turns, the second waits here for the first's commit and begins the moment it comes, while the
 * first's answer is still being read and carried back: its round trips hide behind the first's.
 *
 * Only to avoid conflicts, never for correctness: another replica, a report over the cap below, or
 * any other writer still runs beside a turn, and the transactions' isolation keeps that right.
 *
 * A report whose request was given up (its `signal` aborted: the agent's timeout closed the
 * connection) while it waits for its turn leaves the line without running: the agent resends its
 * items. Once its turn has come it runs to its end, as any request the client gives up on does;
 * that is harmless, every item is fenced by its token and a resent one is answered `duplicate`.
 *
 * Memory: a machine's line exists only while one of its reports runs or waits, and goes with its
 * last one; at most `maxWaiting` wait in it (an agent keeps at most 8 reports in flight), and a
 * report that finds it full runs at once, as without turns.
 */
export class MachineTurns {
  /** Per machine: its report running first, then those waiting, in arrival order. */
  private readonly lines = new Map<string, Turn[]>();

  constructor(private readonly maxWaiting = 8) {}

  /** Machines with a report running or waiting: for tests (a line must not outlive its reports). */
  get machines(): number {
    return this.lines.size;
  }

  async run<T>(machineId: string, signal: AbortSignal | undefined, fn: () => Promise<T>): Promise<T> {
    signal?.throwIfAborted();
    let line = this.lines.get(machineId);
    if (line && line.length > this.maxWaiting) return fn();
    if (!line) this.lines.set(machineId, (line = []));
    const me: Turn = { go: null };
    line.push(me);
    let onAbort: (() => void) | null = null;
    try {
      if (line.length > 1) {
        await new Promise<void>((resolve, reject) => {
          me.go = resolve;
          if (signal) signal.addEventListener('abort', (onAbort = () => reject(signal.reason as Error)), { once: true });
        });
        // Its turn came in the same tick the request was given up: it still has not begun.
        signal?.throwIfAborted();
      }
      return await fn();
    } finally {
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      const i = line.indexOf(me);
      line.splice(i, 1);
      // The one running is first: its end is the next one's turn. One that gave up waiting was not first.
      if (i === 0) line[0]?.go?.();
      if (line.length === 0) this.lines.delete(machineId);
    }
  }
}

interface Turn {
  /** Starts a waiting report; null while it runs or before it waits. */
  go: (() => void) | null;
}
