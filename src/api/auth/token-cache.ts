import type { TokenRecord } from '../../store/records.js';

/**
 * Tokens looked up by hash, kept so that an agent's hundreds of requests a second do not each
 * read the tokens table: a person's or a script's token for `ttlMs` (5 s), a machine's credential
 * for `machineTtlMs` (30 s: with a fleet of 10,000 agents a 5 s TTL was 2,000 reads of the table a
 * second, docs/throughput.md "A fleet of agents"). A revocation made through this server is seen
 * at once (it forgets the token, and re-registering forgets every credential of the machine); one
 * made elsewhere (another replica) within the TTL (docs/security.md, "Tokens").
 *
 * Sized for a fleet: `max` (50,000) entries, the oldest read first out when full.
 */
export class TokenCache {
  private readonly byHash = new Map<string, { token: TokenRecord | null; until: number }>();
  /** The hashes cached of each machine's credentials, so that a registration forgets them without a scan. */
  private readonly byMachine = new Map<string, Set<string>>();

  constructor(
    private readonly load: (hash: string) => Promise<TokenRecord | null>,
    private readonly now: () => number,
    private readonly ttlMs = 5000,
    private readonly max = 50_000,
    private readonly machineTtlMs = 30_000,
  ) {}

  async get(hash: string): Promise<TokenRecord | null> {
    const hit = this.byHash.get(hash);
    if (hit && hit.until > this.now()) return hit.token;
    const token = await this.load(hash);
    // Re-inserted, not updated in place: the map's order is then the order entries were read in.
    this.drop(hash);
    // Full: the oldest go first, one by one. Clearing the whole cache (as it did) made every agent
    // of a fleet as large as `max` read its token again at once, every time it filled (bench:fleet).
    for (const oldest of this.byHash.keys()) {
      if (this.byHash.size < this.max) break;
      this.drop(oldest);
    }
    const machineId = token?.machineId ?? null;
    this.byHash.set(hash, { token, until: this.now() + (machineId !== null ? this.machineTtlMs : this.ttlMs) });
    if (machineId !== null) {
      let hashes = this.byMachine.get(machineId);
      if (!hashes) this.byMachine.set(machineId, (hashes = new Set()));
      hashes.add(hash);
    }
    return token;
  }

  /** Forgets what is known of this token (by id) or of a machine's credentials. */
  forget(match: { tokenId?: string; machineId?: string }): void {
    if (match.machineId !== undefined) for (const hash of [...(this.byMachine.get(match.machineId) ?? [])]) this.drop(hash);
    if (match.tokenId === undefined) return;
    for (const [hash, e] of this.byHash) if (e.token?.id === match.tokenId) this.drop(hash);
  }

  /** Entries held now. */
  get size(): number {
    return this.byHash.size;
  }

  private drop(hash: string): void {
    const e = this.byHash.get(hash);
    if (!e) return;
    this.byHash.delete(hash);
    const machineId = e.token?.machineId;
    if (machineId === undefined || machineId === null) return;
    const hashes = this.byMachine.get(machineId);
    hashes?.delete(hash);
    if (hashes?.size === 0) this.byMachine.delete(machineId);
  }
}
