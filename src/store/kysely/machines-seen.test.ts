import SQLite from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cpuMachine } from '../conformance/fixtures.js';
import { sqliteStoreForTests } from '../sqlite/sqlite-store-for-tests.js';
import type { KyselyStore } from './kysely-store.js';
import { seenRows } from './machine-verbs.js';

const now = 1_700_000_000_000;

/**
 * The liveness loop's write (machinesSeen) runs with a different number of machines at each flush.
 * Each statement text is prepared and kept by the SQLite statement cache (300 KiB of SQLite's
 * memory each for a thousand rows): the texts must be a few lengths, not one per flush.
 */
describe('machinesSeen', () => {
  let store: KyselyStore;
  let texts: Set<string>;

  beforeEach(async () => {
    texts = new Set();
    store = sqliteStoreForTests(new SQLite(':memory:'), { direct: false, log: (q) => (/with seen/.test(q) ? texts.add(q) : undefined) });
    await store.migrate();
  });
  afterEach(async () => {
    await store.close();
  });

  it('writes any number of machines with a few statement texts, its padding naming no machine', async () => {
    const real = await Promise.all(['a', 'b', 'c'].map((n) => store.machineRegister({ ...cpuMachine(n), now })));
    let at = now + 1000;
    for (let n = 1; n <= 1100; n += 7) {
      at += 10;
      const seen = Array.from({ length: n }, (_, i) => ({ machineId: i < real.length ? real[i]!.id : `absent-${i}`, at, periodMs: 4000 }));
      // Every real machine named is moved, and nothing else: a padding row matches no machine.
      expect(await store.machinesSeen({ seen, now: at })).toBe(Math.min(n, real.length));
    }
    expect((await store.machineGet({ machineId: real[2]!.id }))!.heartbeatMs).toBe(4000);
    // 158 flushes of 158 sizes: 1,024 rows a statement at most, padded to a power of two from 16.
    expect(texts.size).toBeLessThanOrEqual(7);
  });

  it('pads to the next power of two, 16 at least', () => {
    expect([1, 16, 17, 1000, 1024].map(seenRows)).toEqual([16, 16, 32, 1024, 1024]);
  });
});
