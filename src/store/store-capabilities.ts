/**
 * What differs between database adapters, as read-only flags the shared store code consults,
 * instead of `if (postgres)` scattered through it.
 */
export interface StoreCapabilities {
  readonly dialect: 'sqlite' | 'postgres';
  /** `SELECT … FOR UPDATE SKIP LOCKED` is available (PostgreSQL); SQLite serialises writers instead. */
  readonly skipLocked: boolean;
  /** One connection writes at a time (SQLite): store calls that wait for it share the next
   *  transaction and its commit (group commit, src/store/kysely/group-commit.ts). */
  readonly singleWriter: boolean;
  /**
   * A statement costs a round trip to a database server (PostgreSQL): many rows' guarded writes go
   * in one `UPDATE … FROM (VALUES …)` (a report's outcomes, a plan's claims; docs/throughput.md).
   * Absent or false (SQLite, in-process): one prepared statement a row, which costs less there
   * than the join (`npm run bench:store`: 10 % more CPU a stage with the set-based writes).
   */
  readonly setBasedWrites?: boolean;
  /**
   * The driver answers each statement of a text of several without parameters (PostgreSQL's simple
   * protocol; postgres/multi-results.ts): a pass before a commit sends its reads without arguments
   * in one round trip (kysely/pass-reads.ts). Absent or false (SQLite, in-process): one read each,
   * which costs no round trip there.
   */
  readonly multiStatementReads?: boolean;
  /**
   * A statement outside a transaction costs one round trip where a transaction costs its begin and
   * commit besides, and reads only what others committed (a pool of connections: PostgreSQL): a
   * heartbeat that writes nothing is answered from one read outside any transaction
   * (kysely/heartbeat-read.ts). Absent or false (SQLite): the heartbeat joins the group's
   * transaction, which costs no round trip there.
   */
  readonly readsOutsideTransactions?: boolean;
}
