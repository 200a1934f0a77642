import type { TokenRecord } from '../../store/records.js';

/**
 * Tokens looked up by hash, kept for `ttlMs` so that an agent's hundreds of requests a second do
 * not each read the tokens table. A revocation made through this server is seen at once (it
 * forgets the token); one made elsewhere (another replica) within `ttlMs`.
 */
export class TokenCache {
  private readonly byHash = new Map<string, { token: TokenRecord | null; until: number }>();

  constructor(
    private readonly load: (hash: string) => Promise<TokenRecord | null>,
    private readonly now: () => number,
    private readonly ttlMs = 5000,
    private readonly max = 10_000,
  ) {}

  async get(hash: string): Promise<TokenRecord | null> {
    const hit = this.byHash.get(hash);
    if (hit && hit.until > this.now()) return hit.token;
    const token = await this.load(hash);
    // Re-inserted, not updated in place: the map's order is then the order entries expire in.
    this.byHash.delete(hash);
    // Full: the oldest go first, one by one. Clearing the whole cache (as it did) made every agent
    // of a fleet as large as `max` read its token again at once, every time it filled (bench:fleet).
    for (const oldest of this.byHash.keys()) {
      if (this.byHash.size < this.max) break;
      this.byHash.delete(oldest);
    }
    this.byHash.set(hash, { token, until: this.now() + this.ttlMs });
    return token;
  }

  /** Forgets what is known of these tokens (by id) or of a machine's credentials. */
  forget(match: { tokenId?: string; machineId?: string }): void {
    for (const [hash, e] of this.byHash) {
      if (!e.token) continue;
      if ((match.tokenId && e.token.id === match.tokenId) || (match.machineId && e.token.machineId === match.machineId)) this.byHash.delete(hash);
    }
  }
}
