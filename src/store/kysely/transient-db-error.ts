/**
 * PostgreSQL's answers that mean "run the whole transaction again": 40001 (serialization
 * failure: under SERIALIZABLE, a concurrent transaction's writes would have changed what this one
 * read) and 40P01 (deadlock: this one was picked to die). Nothing of it was written.
 */
const TRANSIENT = new Set(['40001', '40P01']);

/**
 * Whether the database refused a transaction only for now (a conflict with concurrent ones), so
 * running it again whole may succeed. Not the agent client's isRetryable (a call that may succeed
 * if sent again) nor the advancer's retry of a failed attempt.
 */
export function isTransientDbError(err: unknown): boolean {
  // A savepoint's failure that took the transaction with it (tx-context.ts) carries the database's error.
  if (err instanceof Error && err.name === 'TransactionAborted') return isTransientDbError(err.cause);
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && TRANSIENT.has(code);
}

/**
 * Whether the database itself answered with this error (a constraint, a conflict): on PostgreSQL
 * such an error aborts the whole transaction, which no later statement but a rollback (to a
 * savepoint, or of all) gets past. Told by its shape (pg's DatabaseError carries the SQLSTATE and
 * a severity), so that the shared store code imports no driver.
 */
export function isDatabaseError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const e = err as { code?: unknown; severity?: unknown };
  return typeof e.code === 'string' && typeof e.severity === 'string';
}

/**
 * PostgreSQL's invalid_schema_name (3F000) or undefined_table (42P01): a schema or a table named in
 * the statement, or read by name from the catalog, is gone. Kysely's migrator reads every schema's
 * tables and privileges by name while it looks for its table, so another client dropping a schema
 * meanwhile fails a migration that can simply run again (KyselyStore.migrate; seen with both
 * codes: `relation "fleet_….events" does not exist` when the fleet test dropped its schema). A
 * migration's own missing table fails the same way each time, and is thrown after the retries.
 */
export function isSchemaGone(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '3F000' || code === '42P01';
}
