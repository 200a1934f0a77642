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

  it('a machine’s credential is kept for machineTtlMs, a person’s token for ttlMs', async () => {
    let now = 0;
    const { cache, loads } = loading(() => now);
    await cache.get('m1');
    await cache.get('team');
    now = 29_000;
    loads.length = 0;
    await cache.get('m1');
    await cache.get('team');
    expect(loads).toEqual(['team']);
    now = 30_001;
    await cache.get('m1');
    expect(loads).toEqual(['team', 'm1']);
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
