import SQLite from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { cpuMachine } from '../conformance/fixtures.js';
import { sqliteStoreForTests } from '../sqlite/sqlite-store-for-tests.js';
import { type KyselyStore, SEEN_ROWS_A_TURN } from './kysely-store.js';
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

  async function open(setBasedWrites: boolean): Promise<void> {
    texts = new Set();
    store = sqliteStoreForTests(new SQLite(':memory:'), {
      direct: false,
      setBasedWrites,
      log: (q) => {
        if (/^update "machines" set "last_heartbeat_at"|with seen/.test(q)) texts.add(q);
      },
    });
    await store.migrate();
  }
  afterEach(async () => {
    await store.close();
  });

  /** Flushes of 158 sizes, 1 to 1,100 machines, three of them real; each real one moved, nothing else. */
  async function flushes(): Promise<KyselyStore> {
    const real = await Promise.all(['a', 'b', 'c'].map((n) => store.machineRegister({ ...cpuMachine(n), now })));
    texts.clear();
    let at = now + 1000;
    for (let n = 1; n <= 1100; n += 7) {
      at += 10;
      const seen = Array.from({ length: n }, (_, i) => ({ machineId: i < real.length ? real[i]!.id : `absent-${i}`, at, periodMs: 4000 }));
      expect(await store.machinesSeen({ seen, now: at })).toBe(Math.min(n, real.length));
    }
    // Never moved back: an earlier time changes nothing.
    expect(await store.machinesSeen({ seen: [{ machineId: real[0]!.id, at: now, periodMs: 2000 }], now: at })).toBe(0);
    expect((await store.machineGet({ machineId: real[2]!.id }))!.heartbeatMs).toBe(4000);
    return store;
  }

  it('set-based (PostgreSQL): any number of machines with a few statement texts, its padding naming no machine', async () => {
    await open(true);
    await flushes();
    // 1,024 rows a statement at most, padded to a power of two from 16.
    expect(texts.size).toBeLessThanOrEqual(7);
    expect([...texts].every((t) => t.startsWith('with seen'))).toBe(true);
  });

  it('one writer in process (SQLite): one prepared statement a row, the same text whatever the flush', async () => {
    await open(false);
    await flushes();
    // Nothing built per flush: no text of the flush's length to compile, bind and keep.
    expect([...texts]).toEqual([
      expect.stringMatching(/^update "machines" set "last_heartbeat_at" = \?, "heartbeat_ms" = \? where "id" = \? and "last_heartbeat_at" < \?$/),
    ]);
  });

  it('one writer in process (SQLite): a large flush lets the event loop turn between its parts, every row written', async () => {
    await open(false);
    const ms = await Promise.all(Array.from({ length: 2500 }, (_, i) => store.machineRegister({ ...cpuMachine(`m${i}`), now })));
    // Turns of the event loop while the flush runs: a heartbeat arriving meanwhile is read at one of them.
    let turns = 0;
    let flushing = true;
    const tick = (): void => {
      if (!flushing) return;
      turns++;
      setImmediate(tick);
    };
    setImmediate(tick);
    const flushed = store.machinesSeen({ seen: ms.map((m, i) => ({ machineId: m.id, at: now + 1000 + i, periodMs: 4000 })), now: now + 2000 });
    expect(await flushed.finally(() => (flushing = false))).toBe(2500);
    // 2,500 rows in parts of SEEN_ROWS_A_TURN: a turn between each two (one transaction, before: none).
    expect(turns).toBeGreaterThanOrEqual(Math.ceil(2500 / SEEN_ROWS_A_TURN) - 1);
    for (const i of [0, SEEN_ROWS_A_TURN - 1, SEEN_ROWS_A_TURN, 2499])
      expect((await store.machineGet({ machineId: ms[i]!.id }))!.lastHeartbeatAt).toBe(now + 1000 + i);
  });

  it('pads to the next power of two, 16 at least', () => {
    expect([1, 16, 17, 1000, 1024].map(seenRows)).toEqual([16, 16, 32, 1024, 1024]);
  });
});
