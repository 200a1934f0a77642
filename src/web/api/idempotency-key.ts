/**
 * A fresh `Idempotency-Key`: 128 random bits as 32 hex digits. From `crypto.getRandomValues`, not
 * `crypto.randomUUID`, which browsers give only to secure contexts: a dashboard opened over plain
 * http on another host than localhost has no `randomUUID`, but it does have this.
 */
export function newIdempotencyKey(randomBytes: (n: number) => Uint8Array = (n) => crypto.getRandomValues(new Uint8Array(n))): string {
  return Array.from(randomBytes(16), (b) => b.toString(16).padStart(2, '0')).join('');
}
