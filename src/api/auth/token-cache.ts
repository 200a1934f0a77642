import type { TokenRecord } from '../../store/records.js';

interface Read {
  p: Promise<TokenRecord | null>;
  forgetsBefore: number;
}

/**
 * Tokens looked up by hash, kept so that an agent's hundreds of requests a second do not each
 * read the tokens table: a person's or a script's token for `ttlMs` (5 s), a machine's credential
 * for `machineTtlMs` (30 s: with a fleet of 10,000 agents a 5 s TTL was 2,000 reads of the table a
 * second, docs/throughput.md "A fleet of agents"). A revocation made through this server is seen
 * at once (it forgets the token, and re-registering forgets every credential of the machine); one
 * made elsewhere (another replica) within the TTL (docs/security.md, "Tokens").
 *
 * Sized for a fleet: `max` (50,000) entries, the oldest read first out when full.
 *
 * Read ahead: a hit in the last third of its entry's time is answered from the cache at once, and
 * the token is read again in the background, so that an agent whose requests keep coming never
 * waits on the read. With 10,000 agents on PostgreSQL, the requests that found their credential's
 * 30 s over waited on that read behind the heartbeats' writes in the connection pool: the slowest
 * 1 % of heartbeats under load spent a second between the request read and its handler
 * (docs/throughput.md, "Where a heartbeat's time goes, on one clock"). An entry is still never
 * used past its time (a hit then waits for the read, the one in flight if there is one), so a
 * revocation made elsewhere is seen within the same TTL; a read in flight when this server
 * forgets a token is neither cached nor shared with a later request, so a revocation made here
 * is never undone by an older read. Concurrent reads of one hash are one read (where no forget
 * came between them).
 */
export class TokenCache {
  private readonly byHash = new Map<string, { token: TokenRecord | null; until: number; readAgainAt: number }>();
  /** The hashes cached of each machine's credentials, so that a registration forgets them without a scan. */
  private readonly byMachine = new Map<string, Set<string>>();
  /** The read a request for a hash joins, with the count of forget() calls when it began. */
  private readonly reading = new Map<string, Read>();
  /** Every read in flight, those no request joins any more (begun before a forget) too. */
  private readonly inFlight = new Set<Read>();
  /** Counts forget() calls. */
  private forgets = 0;
  /** The forget() calls a read still in flight may have begun before (numbered): what it read of a token forgotten since is not cached. */
  private recentForgets: { n: number; tokenId?: string; machineId?: string }[] = [];

  constructor(
    private readonly load: (hash: string) => Promise<TokenRecord | null>,
    private readonly now: () => number,
    private readonly ttlMs = 5000,
    private readonly max = 50_000,
    private readonly machineTtlMs = 30_000,
  ) {}

  async get(hash: string): Promise<TokenRecord | null> {
    const hit = this.byHash.get(hash);
    const now = this.now();
    if (hit && hit.until > now) {
      // A failed read ahead leaves the entry as it was: the next hit tries again, and past its time a hit reads (and throws) itself.
      if (hit.readAgainAt <= now && !this.reading.has(hash)) this.read(hash).catch(() => {});
      return hit.token;
    }
    return this.read(hash);
  }

  private read(hash: string): Promise<TokenRecord | null> {
    const joined = this.reading.get(hash);
    // Shared only if nothing was forgotten since it began: it may hold a token revoked since, which
    // a request after the revocation must not be let in by (this server refuses it at once).
    if (joined && joined.forgetsBefore === this.forgets) return joined.p;
    const forgetsBefore = this.forgets;
    const p = this.load(hash)
      .then((token) => {
        if (!this.forgottenSince(forgetsBefore, token)) this.put(hash, token);
        return token;
      })
      .finally(() => {
        if (this.reading.get(hash) === entry) this.reading.delete(hash);
        this.inFlight.delete(entry);
        if (this.inFlight.size === 0) this.recentForgets = [];
      });
    const entry: Read = { p, forgetsBefore };
    this.reading.set(hash, entry);
    this.inFlight.add(entry);
    return p;
  }

  private forgottenSince(n: number, token: TokenRecord | null): boolean {
    if (token === null || n === this.forgets) return false;
    return this.recentForgets.some((f) => f.n > n && (f.tokenId === token.id || (f.machineId !== undefined && f.machineId === token.machineId)));
  }

  private put(hash: string, token: TokenRecord | null): void {
    // Re-inserted, not updated in place: the map's order is then the order entries were read in.
    this.drop(hash);
    // Full: the oldest go first, one by one. Clearing the whole cache (as it did) made every agent
    // of a fleet as large as `max` read its token again at once, every time it filled (bench:fleet).
    for (const oldest of this.byHash.keys()) {
      if (this.byHash.size < this.max) break;
      this.drop(oldest);
    }
    const machineId = token?.machineId ?? null;
    const ttl = machineId !== null ? this.machineTtlMs : this.ttlMs;
    const now = this.now();
    this.byHash.set(hash, { token, until: now + ttl, readAgainAt: now + (ttl * 2) / 3 });
    if (machineId !== null) {
      let hashes = this.byMachine.get(machineId);
      if (!hashes) this.byMachine.set(machineId, (hashes = new Set()));
      hashes.add(hash);
    }
  }

  /** Forgets what is known of this token (by id) or of a machine's credentials. */
  forget(match: { tokenId?: string; machineId?: string }): void {
    this.forgets++;
    if (this.inFlight.size > 0) {
      this.recentForgets.push({ n: this.forgets, ...match });
      // Reads seldom take long: past a thousand kept, those no read in flight began before go.
      if (this.recentForgets.length > 1000) {
        const oldest = Math.min(...[...this.inFlight].map((r) => r.forgetsBefore));
        this.recentForgets = this.recentForgets.filter((f) => f.n > oldest);
      }
    }
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
