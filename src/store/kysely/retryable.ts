/**
 * PostgreSQL's answers that mean "run the whole transaction again": 40001 (serialization
 * failure: under SERIALIZABLE, a concurrent transaction's writes would have changed what this one
 * read) and 40P01 (deadlock: this one was picked to die). Nothing of it was written.
 */
const RETRYABLE = new Set(['40001', '40P01']);

export function isRetryable(err: unknown): boolean {
  // A savepoint's failure that took the transaction with it (tx-context.ts) carries the database's error.
  if (err instanceof Error && err.name === 'TransactionAborted') return isRetryable(err.cause);
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE.has(code);
}

/** How long to wait before try `n + 1` (n ≥ 1): decorrelated, growing, under 50 ms. */
export function retryDelayMs(n: number, random: () => number = Math.random): number {
  return Math.min(50, 2 ** n) * (0.5 + random() / 2);
}
