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
