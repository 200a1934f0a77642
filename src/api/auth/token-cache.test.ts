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
