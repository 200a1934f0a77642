import { backoffDelay, type Backoff } from '../lib/backoff-delay.js';

/** After a failed boot, the pool's next start waits 30 s, doubling with each failure in a row, at most 10 minutes. */
export const BOOT_BACKOFF: Backoff = { baseMs: 30_000, maxMs: 600_000 };

/**
 * Until when a pool starts nothing after `failuresInARow` boots that failed (the last at
 * `lastFailureAt`, ms), or null with none: `PoolState.backoffUntil`. No jitter: one leader decides
 * for a pool, so there is no herd to spread, and the same rows give the same answer after a restart.
 */
export function bootBackoffUntil(failuresInARow: number, lastFailureAt: number | null, backoff: Backoff = BOOT_BACKOFF): number | null {
  if (failuresInARow <= 0 || lastFailureAt === null) return null;
  return lastFailureAt + backoffDelay(backoff, failuresInARow);
}
