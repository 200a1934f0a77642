/**
 * How a wait grows while something keeps failing: `baseMs` before the first retry, doubling with
 * each failure in a row, never over `maxMs`, then scaled by a factor drawn in `jitter`
 * ([low, high], default [1, 1]: none) so that many callers failing together do not retry together.
 */
export interface Backoff {
  baseMs: number;
  maxMs: number;
  jitter?: readonly [low: number, high: number];
}

/**
 * "Equal jitter": half the delay fixed, half drawn, so a retry never comes sooner than half the
 * nominal delay yet callers that failed together spread over the other half.
 */
export const EQUAL_JITTER = [0.5, 1] as const;

/**
 * The delay before retry `n` (1: after the first failure), in whole milliseconds. `random` is a
 * number in [0, 1) the caller draws (Math.random(), a seeded source, a test's constant), so this
 * stays pure.
 */
export function backoffDelay(b: Backoff, n: number, random = 0): number {
  // The exponent is bounded so that no count of failures makes the product Infinity (or NaN when
  // multiplied by a zero base); any real cap is reached long before 2^60.
  const nominal = Math.min(b.maxMs, b.baseMs * 2 ** Math.min(60, Math.max(0, n - 1)));
  const [low, high] = b.jitter ?? [1, 1];
  // low·d + (high - low)·d·r rather than d·(low + (high - low)·r): with equal jitter it is d/2 + d/2·r,
  // the advancer's formula to the last bit, so stored retry times do not move.
  return Math.round(nominal * low + nominal * (high - low) * Math.min(Math.max(random, 0), 1));
}
