/**
 * A server's Retry-After, as an agent honours it (docs/failure-detection.md, "Shedding heartbeats
 * past the budget"): never sooner than asked, and spread over up to a quarter more, so that a
 * crowd told the same wait at once does not come back at once.
 */

/** The longest wait, as a multiple of Retry-After: a server that sheds allows for it. */
export const RETRY_AFTER_SPREAD_MAX = 1.25;

/** The wait for a Retry-After of `retryAfterMs`, `u` uniform in [0, 1). */
export function retryAfterWaitMs(retryAfterMs: number, u: number): number {
  return retryAfterMs * (1 + (RETRY_AFTER_SPREAD_MAX - 1) * u);
}

/**
 * A Retry-After header in ms: delay-seconds (a whole number) or an HTTP date (RFC 9110 10.2.3);
 * null when absent or unreadable. Capped at `maxMs`: a wrong clock or a typo must not silence a
 * heartbeat for hours.
 */
export function retryAfterMs(header: string | string[] | undefined, nowMs: number, maxMs: number): number | null {
  const v = Array.isArray(header) ? header[0] : header;
  if (v === undefined || v.trim() === '') return null;
  const t = v.trim();
  let ms: number;
  if (/^\d+$/.test(t)) ms = Number(t) * 1000;
  else {
    const at = Date.parse(t);
    if (Number.isNaN(at)) return null;
    ms = Math.max(0, at - nowMs);
  }
  return Math.min(ms, maxMs);
}
