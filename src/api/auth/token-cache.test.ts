import { describe, expect, it } from 'vitest';
import type { TokenRecord } from '../../store/records.js';
import { TokenCache } from './token-cache.js';

describe('TokenCache', () => {
  it('full, it drops the oldest entry only: the others stay cached', async () => {
    let now = 0;
    const loads: string[] = [];
    const cache = new TokenCache(
      async (hash) => {
        loads.push(hash);
        return { id: `tok-${hash}` } as TokenRecord;
      },
      () => now,
      5000,
      3,
    );
    for (const h of ['a', 'b', 'c']) await cache.get(h);
    now = 10;
    await cache.get('d'); // full: 'a', the oldest, goes
    loads.length = 0;
    for (const h of ['b', 'c', 'd']) expect((await cache.get(h))?.id).toBe(`tok-${h}`);
    expect(loads).toEqual([]);
    await cache.get('a');
    expect(loads).toEqual(['a']);
  });

  it('an entry read again after its time is kept as the newest', async () => {
    let now = 0;
    let loaded = 0;
    const cache = new TokenCache(
      async (hash) => {
        loaded++;
        return { id: hash } as TokenRecord;
      },
      () => now,
      100,
      2,
    );
    await cache.get('a');
    now = 50;
    await cache.get('b');
    now = 150; // 'a' expired: read again, now the newest
    await cache.get('a');
    now = 160;
    await cache.get('c'); // full: 'b' goes, not 'a'
    loaded = 0;
    await cache.get('a');
    expect(loaded).toBe(0);
  });
});

describe('TokenCache, machine credentials', () => {
  const rec = (hash: string): TokenRecord => ({
    id: `tok-${hash}`,
    kind: hash.startsWith('m') ? 'machine' : 'team',
    team: null,
    machineId: hash.startsWith('m') ? `machine-${hash}` : null,
    name: hash,
    createdAt: 0,
    expiresAt: null,
    revokedAt: null,
  });
  /** A cache of `size` entries (5 s for people, 30 s for machines) that notes each hash it reads. */
  const loading = (clock: () => number, size = 100) => {
    const loads: string[] = [];
    const cache = new TokenCache(
      async (hash) => {
        loads.push(hash);
        return rec(hash);
      },
      clock,
      5000,
      size,
      30_000,
    );
    return { cache, loads };
  };

  /** A cache whose first read answers at once (named v1) and whose later reads each wait for their release (v2, v3, …). */
  const heldReads = (clock: () => number) => {
    const releases: (() => void)[] = [];
    let version = 0;
    const cache = new TokenCache(
      (hash) => {
        const v = ++version;
        return v === 1 ? Promise.resolve({ ...rec(hash), name: 'v1' }) : new Promise((r) => releases.push(() => r({ ...rec(hash), name: `v${v}` })));
      },
      clock,
      5000,
      100,
      30_000,
    );
    return { cache, releases };
  };

  it('a machine’s credential is kept for machineTtlMs, a person’s token for ttlMs', async () => {
    let now = 0;
    const { cache, loads } = loading(() => now);
    await cache.get('m1');
    await cache.get('team');
    now = 19_000;
    loads.length = 0;
    await cache.get('m1');
    await cache.get('team');
    expect(loads).toEqual(['team']);
    now = 30_001;
    // Not read ahead (no hit in its last third): past its time, read again.
    const { cache: unread, loads: unreadLoads } = loading(() => now);
    now = 0;
    await unread.get('m1');
    now = 30_001;
    await unread.get('m1');
    expect(unreadLoads).toEqual(['m1', 'm1']);
  });

  it('a hit in the last third of its time is answered at once and read again behind it; the entry then lasts from that read', async () => {
    let now = 0;
    const { cache, releases } = heldReads(() => now);
    expect((await cache.get('m1'))?.name).toBe('v1');
    now = 21_000;
    // Answered from the cache while the read ahead is in flight, and only one read for many hits.
    expect((await cache.get('m1'))?.name).toBe('v1');
    expect((await cache.get('m1'))?.name).toBe('v1');
    expect(releases).toHaveLength(1);
    releases[0]!();
    await new Promise((r) => setImmediate(r));
    now = 40_000; // past the first read's 30 s, before the second's last third
    expect((await cache.get('m1'))?.name).toBe('v2');
    expect(releases).toHaveLength(1);
  });

  it('never past its time: a hit after it waits for the read, the one in flight if any', async () => {
    let now = 0;
    const { cache, releases } = heldReads(() => now);
    await cache.get('m1');
    now = 25_000;
    await cache.get('m1'); // the read ahead begins, and hangs
    now = 30_001;
    let got: string | undefined;
    const late = cache.get('m1').then((t) => (got = t?.name));
    await new Promise((r) => setImmediate(r));
    expect(got).toBeUndefined();
    expect(releases).toHaveLength(1); // joined the read in flight, no second one
    releases[0]!();
    await late;
    expect(got).toBe('v2');
  });

  it('a read in flight when this server forgets the token is not cached: a revocation made here is not undone by an older read', async () => {
    let now = 0;
    const releases: (() => void)[] = [];
    let revoked = false;
    const loads: string[] = [];
    const cache = new TokenCache(
      (hash) => {
        loads.push(hash);
        const answer = { ...rec(hash), revokedAt: revoked ? 1 : null };
        return loads.length === 1 ? Promise.resolve(answer) : new Promise((r) => releases.push(() => r(answer)));
      },
      () => now,
      5000,
      100,
      30_000,
    );
    await cache.get('m1');
    now = 25_000;
    await cache.get('m1'); // read ahead, in flight: it read the token before the revocation
    revoked = true;
    cache.forget({ machineId: 'machine-m1' });
    // A request after the revocation does not join the older read: it reads again, and is refused.
    const during = cache.get('m1');
    expect(loads).toHaveLength(3);
    releases[1]!();
    expect((await during)?.revokedAt).toBe(1);
    releases[0]!();
    await new Promise((r) => setImmediate(r));
    // The older read was not cached: the next get reads and finds it revoked.
    const next = cache.get('m1');
    expect(loads).toHaveLength(3);
    expect((await next)?.revokedAt).toBe(1);
    // A forget of another machine meanwhile does not stop a read from being cached.
    now = 50_000;
    const other = cache.get('m2');
    cache.forget({ machineId: 'machine-m9' });
    releases[2]!();
    await other;
    loads.length = 0;
    await cache.get('m2');
    expect(loads).toEqual([]);
  });

  it('forgetting a machine drops each of its cached credentials at once, and no other', async () => {
    const { cache, loads } = loading(() => 0);
    for (const h of ['m1', 'm2', 'team']) await cache.get(h);
    cache.forget({ machineId: 'machine-m1' });
    expect(cache.size).toBe(2);
    loads.length = 0;
    for (const h of ['m1', 'm2', 'team']) await cache.get(h);
    expect(loads).toEqual(['m1']);
    cache.forget({ tokenId: 'tok-m2' });
    cache.forget({ tokenId: 'tok-team' });
    expect(cache.size).toBe(1);
    // Full, the oldest machine credential goes, and forgetting its machine later finds nothing to drop.
    const { cache: small } = loading(() => 0, 2);
    for (const h of ['m1', 'm2', 'm3']) await small.get(h);
    expect(small.size).toBe(2);
    small.forget({ machineId: 'machine-m1' });
    expect(small.size).toBe(2);
    small.forget({ machineId: 'machine-m3' });
    expect(small.size).toBe(1);
  });
});
