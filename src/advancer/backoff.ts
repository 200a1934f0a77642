import type { BackoffPolicy } from '../domain/job-definition.js';
import { backoffDelay, EQUAL_JITTER } from '../lib/backoff-delay.js';

/**
 * Delay before retry number `failures` (1 = after the first failure): exponential, capped, with
 * "equal jitter" (half fixed, half random) so that stages failing together do not retry together,
 * while a retry never comes sooner than half the nominal delay. `jitter` is a number in [0, 1)
 * supplied by the caller, which keeps this function pure and testable.
 */
export function backoffMs(policy: BackoffPolicy, failures: number, jitter: number): number {
  // Capped at a week whatever the policy says (the spec schema refuses more), so the result is
  // always a finite time that fits a date.
  const capSeconds = Math.min(policy.maxSeconds, 7 * 24 * 3600);
  return backoffDelay({ baseMs: policy.initialSeconds * 1000, maxMs: capSeconds * 1000, jitter: EQUAL_JITTER }, failures, jitter);
}
