import type { OutboxMessage } from '../records.js';
import { type DirectConnection, runDirectlyWithin } from './prepared-query.js';
import { markHandled, PLACEMENT_HINTS, SavepointsNeeded, TransactionAborted, TxContext, type Db, type Trx } from './tx-context.js';

interface Waiter {
  now: number;
  fn: (tx: TxContext) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit for a database with one writer (SQLite): the store calls that wait while a
 * transaction runs are run together in the next one, each under its own savepoint, and share its
 * commit (one disk flush instead of one each). A caller that fails rolls back to its savepoint and
 * gets its error; the others commit. Every caller is answered only after the commit, so what is
 * acknowledged is durable, exactly as with a transaction of its own. A group starts right after
 * the I/O callbacks of the event loop's turn in which its first call came (setImmediate), so the
 * requests that arrived together share it; no timer, no added latency beyond that turn.
 * docs/throughput.md has the numbers.
 */
/**
 * What a pass before a commit did: the outbox messages it wrote, and whether it ran to its end
 * with nothing left (Store.placeBeforeCommit): then its transaction's placement hints are handled.
 */
export interface PassBeforeCommit {
  written: OutboxMessage[];
  handled: boolean;
}

/**
 * Runs in a group's transaction after its members, before the commit, when a member readied
 * stages or freed capacity. It must not throw for anything of its own (a failure it undoes and
 * reports itself): the group's members would fail with it.
 */
export type BeforeCommit = (trx: Trx, now: number, optimistic: boolean) => Promise<PassBeforeCommit>;

export class GroupCommit {
  private queue: Waiter[] = [];
  private draining = false;
  beforeCommit: BeforeCommit | null = null;

  constructor(
    private readonly db: Db,
    private readonly committed: (written: OutboxMessage[]) => void,
    /** The context each member runs in (the store's settings for its transactions); `optimistic`: savepoints only when needed (TxContext). */
    private readonly context: (trx: Trx, now: number, optimistic: boolean) => TxContext = (trx, now, optimistic) =>
      new TxContext(trx, now, false, false, optimistic),
    private readonly maxGroup = 64,
    /** The connection itself, for the group's statements while its transaction holds it (prepared-query.ts). */
    private readonly direct: DirectConnection | null = null,
  ) {}

  run<T>(now: number, fn: (tx: TxContext) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ now, fn, resolve: resolve as (v: unknown) => void, reject });
      if (this.draining || this.starting) return;
      // Not at once, but after the I/O callbacks of this turn of the event loop: SQLite runs a
      // transaction and its commit synchronously, so a call that started at once would be over
      // before the other requests that arrived with it were even parsed, and every transaction
      // would be alone. setImmediate runs right after them, still in this turn: no timer.
      this.starting = true;
      setImmediate(() => {
        this.starting = false;
        void this.drain();
      });
    });
  }

  private starting = false;
  /** Groups run a second time with savepoints (a part failed after writing): for tests and diagnosis. */
  carefulRuns = 0;

  private async drain(): Promise<void> {
    this.draining = true;
    try {
      while (this.queue.length > 0) await this.runGroup(this.queue.splice(0, this.maxGroup));
    } finally {
      this.draining = false;
    }
  }

  /**
   * Runs a group in one transaction: first optimistically (no savepoints, docs/throughput.md), and
   * again with them, from the start, only if a member or a part of one failed after writing.
   */
  private async runGroup(group: Waiter[], careful = false): Promise<void> {
    const outcomes: ({ ok: true; value: unknown; written: OutboxMessage[] } | { ok: false; error: unknown })[] = [];
    let placed: PassBeforeCommit = { written: [], handled: false };
    // Only on a connection that can say whether SQLite has rolled the transaction back by itself.
    const optimistic = !careful && this.direct !== null;
    const began = performance.now();
    try {
      await this.db.transaction().execute((trx) =>
        runDirectlyWithin(trx, this.direct, async () => {
          for (const w of group) {
            const ctx = this.context(trx, w.now, optimistic);
            const body = async () => {
              const value = await w.fn(ctx);
              await ctx.flush();
              return value;
            };
            if (group.length === 1) {
              // Alone: its own transaction, rolled back whole if it throws.
              outcomes.push({ ok: true, value: await body(), written: ctx.written });
              continue;
            }
            try {
              outcomes.push({ ok: true, value: await ctx.savepoint(body), written: ctx.written });
            } catch (error) {
              // The database dropped the whole transaction: every member fails, none commits.
              if (error instanceof TransactionAborted) throw error;
              outcomes.push({ ok: false, error });
            }
          }
          const hinted = outcomes.some((o) => o.ok && o.written.some((m) => PLACEMENT_HINTS.has(m.topic)));
          if (this.beforeCommit && hinted) placed = await this.beforeCommit(trx, group[0]!.now, optimistic);
        }),
      );
    } catch (error) {
      // Rolled back whole, committed and answered nothing: run it again, undoing parts with savepoints.
      if (error instanceof SavepointsNeeded && !careful) {
        this.carefulRuns++;
        return this.runGroup(group, true);
      }
      // The transaction itself failed (or a caller alone threw): nobody's writes stand.
      for (const w of group) w.reject(error);
      return;
    }
    // The one pass ran after every member's writes: it handled the hints of all of them, or of none.
    const handed = placed.handled ? (m: OutboxMessage[]) => markHandled(m, began) : (m: OutboxMessage[]) => m;
    group.forEach((w, i) => {
      const o = outcomes[i]!;
      if (!o.ok) return w.reject(o.error);
      if (o.written.length) this.committed(handed(o.written));
      w.resolve(o.value);
    });
    if (placed.written.length) this.committed(handed(placed.written));
  }
}
