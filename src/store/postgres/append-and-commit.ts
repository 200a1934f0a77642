import pg from 'pg';
import { AND_COMMIT } from '../kysely/tx-context.js';

/**
 * A transaction's last append and its COMMIT sent to PostgreSQL in one message, so that the append
 * lock (docs/store-contract.md, "Sequences in commit order") is held for PostgreSQL's own work only:
 * the statement, then the commit. Sent apart, the lock was held across a round trip to Node (the
 * append's answer read by the event loop, Kysely's callback returning, then COMMIT written), and a
 * starved process kept every other appender waiting behind it (docs/throughput.md, "The append and
 * its commit in one message").
 *
 * The pipeline is the extended protocol's: Parse/Bind/Describe/Execute for the append,
 * Parse/Bind/Execute for `commit`, then one Sync. The rules it leans on (PostgreSQL's protocol,
 * "Extended Query" and "Pipelining"):
 * - an error in any message before the Sync makes the server skip the rest up to the Sync: a failed
 *   append is never followed by its commit, and the transaction is left open and aborted (status
 *   `E`), for Kysely's ROLLBACK to end as it does today;
 * - the COMMIT runs in the transaction the client opened with BEGIN (not the implicit one a
 *   pipeline opens without it), and a COMMIT that fails (40001 from a serializable transaction's
 *   check at commit, a deferred constraint) ends the transaction all the same: no ROLLBACK is
 *   needed after it, and its error is this query's, so the store's tx() runs the transaction again
 *   whole (isTransientDbError) as it did when the COMMIT was a statement of its own;
 * - one Sync, one ReadyForQuery: the client's queue moves on once, after both.
 *
 * Kysely then sends its own COMMIT (or, after an error, ROLLBACK): where the fused commit ended the
 * transaction (its CommandComplete, `COMMIT`, came), the connection answers that COMMIT here,
 * without a round trip. After any error the ROLLBACK goes to the server: it ends a transaction
 * left open (an error before the commit ran) and answers a warning where the refused commit had
 * ended it already (a round trip only on that rare path; the review's case of a cancel between the
 * two Executes).
 */

type Query = (...args: unknown[]) => unknown;

/** The parts of pg's connection this sends with (pg/lib/connection.js). */
interface Wire {
  parse(q: { text: string; name?: string; types?: unknown[] }): void;
  bind(q: { portal?: string; statement?: string; values?: unknown[]; valueMapper?: (v: unknown) => unknown }): void;
  describe(q: { type: 'P' | 'S'; name?: string }): void;
  execute(q: { portal?: string; rows?: number }): void;
  sync(): void;
  stream: { cork?: () => void; uncork?: () => void };
}

/** The parts of pg's Result this fills (pg/lib/result.js): the append's rows and its command tag. */
interface ResultBuilder extends pg.QueryResult {
  addFields(fields: unknown[]): void;
  parseRow(fields: unknown[]): unknown;
  addRow(row: unknown): void;
  addCommandComplete(msg: { text: string }): void;
}

/** What one fused append answered: its result, and whether its transaction is over (committed or not). */
type Done = (err: Error | null, result: pg.QueryResult | null, ended: boolean) => void;

/**
 * The append and the commit as one pg Submittable (the interface pg-cursor uses): pg's Client calls
 * `submit` when the connection is free, then the handlers below as the server's messages come.
 */
class AppendAndCommit {
  private readonly result: ResultBuilder;
  /** The append's CommandComplete came: what follows is the commit's. */
  private appended = false;
  /** The commit's CommandComplete came: the transaction is over, committed. */
  private committed = false;
  private failed: Error | null = null;

  constructor(
    private readonly text: string,
    private readonly values: unknown[],
    types: pg.CustomTypesConfig,
    private readonly done: Done,
  ) {
    this.result = new pg.Result('', types as never) as unknown as ResultBuilder;
  }

  submit(connection: unknown): void {
    const wire = connection as Wire;
    // The values converted before any message is written: a conversion that threw after the Parse
    // would leave a pipeline with no Sync, and the connection waiting for ever (review).
    const values = this.values.map(prepareValue);
    // One write for every message, as pg's own Query does.
    wire.stream.cork?.();
    try {
      wire.parse({ text: this.text });
      wire.bind({ values });
      wire.describe({ type: 'P' });
      wire.execute({});
      wire.parse({ text: 'commit' });
      wire.bind({});
      wire.execute({});
      wire.sync();
    } finally {
      wire.stream.uncork?.();
    }
  }

  handleRowDescription(msg: { fields: unknown[] }): void {
    this.result.addFields(msg.fields);
  }

  handleDataRow(msg: { fields: unknown[] }): void {
    // A row that does not parse fails the query at its end, as pg's own Query does: thrown here,
    // it would escape into the connection's message handler.
    try {
      this.result.addRow(this.result.parseRow(msg.fields));
    } catch (err) {
      this.failed ??= err instanceof Error ? err : new Error(String(err));
    }
  }

  handleCommandComplete(msg: { text: string }): void {
    if (!this.appended) {
      this.appended = true;
      this.result.addCommandComplete(msg);
      return;
    }
    // A COMMIT of an aborted transaction answers ROLLBACK: none can reach here (an error before
    // the Sync skips the commit), but one that did must not pass for committed.
    if (msg.text === 'COMMIT') this.committed = true;
    else this.failed = new Error(`internal: the commit sent with the append answered ${msg.text}`);
  }

  handleEmptyQuery(): void {}

  handlePortalSuspended(): void {}

  handleCopyInResponse(): void {}

  handleCopyData(): void {}

  /** pg's Client calls this at the error (it will not call handleReadyForQuery after it). */
  handleError(err: Error): void {
    // After the append's CommandComplete the error is most likely the commit's, which ended the
    // transaction; but one that came before the commit ran (a cancel, 57014) leaves it open and
    // aborted. So an error never counts as the end: Kysely's ROLLBACK goes to the server, which
    // ends an open transaction and answers a warning where there is none (review).
    this.done(err, null, false);
  }

  /** Called only where no ErrorResponse came: both Executes ran, so the transaction is over, whatever the answer. */
  handleReadyForQuery(): void {
    if (this.failed || !this.committed) this.done(this.failed ?? new Error('internal: no answer to the commit sent with the append'), null, true);
    else this.done(null, this.result, true);
  }
}

/** pg's conversion of a parameter to its text (pg/lib/utils.js prepareValue), for the types the store's appends bind. */
function prepareValue(v: unknown): unknown {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string' || Buffer.isBuffer(v)) return v;
  if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') return String(v);
  return JSON.stringify(v);
}

/**
 * Makes `client` send a text that ends with AND_COMMIT (the store's last append of a transaction,
 * tx-context.ts flush) with its commit in one message, and answer the COMMIT or ROLLBACK Kysely
 * sends after it without a round trip where the fused commit ended the transaction. For a pool's
 * `connect` event, installed after every other wrapper of `query` (it must see the text as Kysely
 * sent it). A text without the mark, and every other form of call, goes through as it was; a client
 * without this wrapper runs the marked text as a plain statement (the mark is a comment) and its
 * commit after it, as before.
 */
export function commitWithAppend(client: pg.ClientBase, types: pg.CustomTypesConfig): void {
  const target = client as unknown as { query: Query };
  const query: Query = target.query.bind(client);
  /** The transaction on this connection ended with a fused commit, and Kysely has not yet sent its own end of it. */
  let ended = false;
  target.query = (text: unknown, values?: unknown, ...rest: unknown[]) => {
    if (ended) {
      ended = false;
      if (text === 'commit' || text === 'rollback') return Promise.resolve({ command: text === 'commit' ? 'COMMIT' : 'ROLLBACK', rowCount: null, rows: [] });
      // Nothing may run after the commit as if in the transaction: it would run alone, committed.
      return Promise.reject(new Error(`internal: a statement after its transaction's commit, which went with the last append: ${String(text).slice(0, 80)}`));
    }
    if (typeof text !== 'string' || !text.endsWith(AND_COMMIT) || !Array.isArray(values) || rest.length > 0) return query(text, values, ...rest);
    return new Promise((resolve, reject) => {
      query(
        new AppendAndCommit(text, values, types, (err, result, over) => {
          ended = over;
          if (err) reject(err);
          else resolve(result);
        }),
      );
    });
  };
}
