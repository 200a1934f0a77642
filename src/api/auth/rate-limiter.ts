/**
 * Requests per token (refused ones too; a request with no valid token by its address: authenticate.ts), as token buckets: each token may make `perSecond` requests a second on
 * average and `burst` at once; past that it is answered 429 with the seconds to wait
 * (`Retry-After`). In memory, per server: a replica counts its own share.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { left: number; at: number }>();

  constructor(private readonly limits: (kind: string) => { perSecond: number; burst: number }) {}

  /** Takes one request from `id`'s bucket: null when it may go, else the seconds until it may. */
  take(id: string, kind: string, now: number): number | null {
    const { perSecond, burst } = this.limits(kind);
    if (!(perSecond > 0)) return null;
    let b = this.buckets.get(id);
    if (!b) {
      if (this.buckets.size >= 100_000) this.sweep(now, perSecond, burst);
      b = { left: burst, at: now };
      this.buckets.set(id, b);
    }
    b.left = Math.min(burst, b.left + ((now - b.at) / 1000) * perSecond);
    b.at = now;
    if (b.left >= 1) {
      b.left -= 1;
      return null;
    }
    return Math.max(1, Math.ceil((1 - b.left) / perSecond));
  }

  /** Forgets buckets that have filled up again: they say nothing a new one would not. */
  private sweep(now: number, perSecond: number, burst: number): void {
    for (const [id, b] of this.buckets) if (b.left + ((now - b.at) / 1000) * perSecond >= burst) this.buckets.delete(id);
  }
}
