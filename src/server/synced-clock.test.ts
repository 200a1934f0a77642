import { describe, expect, it } from 'vitest';
import { GOOD_READING_MS, type SkippedReading, SyncedClock } from './synced-clock.js';

describe('SyncedClock', () => {
  it("reads the database's time, and advances with the local clock between readings", async () => {
    const skew = 3_600_000; // the database an hour ahead
    const clock = new SyncedClock(async () => Date.now() + skew);
    await clock.sync();
    expect(Math.abs(clock.now() - (Date.now() + skew))).toBeLessThan(50);
    expect(Math.abs(clock.last!.offsetMs - skew)).toBeLessThan(50);
    const before = clock.now();
    await new Promise((r) => setTimeout(r, 30));
    expect(clock.now() - before).toBeGreaterThanOrEqual(25);
  });

  it('a reading whose round trip took long is left out, the offset in use kept; a quick one is taken again', async () => {
    // The database's clock is this host's; its answer comes `delay` ms after the query, read at the
    // end of that wait (as when the query waited for a connection, or its answer for a busy loop).
    let delay = 0;
    const skipped: SkippedReading[] = [];
    const clock = new SyncedClock(
      async () => {
        // A quick reading answers at once (a microtask): no timer a loaded host could make late.
        if (delay > 0) await new Promise((r) => setTimeout(r, delay));
        return Date.now();
      },
      10_000,
      () => {},
      (r) => skipped.push(r),
    );
    await clock.sync();
    expect(Math.abs(clock.now() - Date.now())).toBeLessThan(20);
    // Taken, the middle of a 400 ms round trip put the clock 200 ms ahead of the database's.
    delay = 400;
    await clock.sync();
    expect(Math.abs(clock.now() - Date.now())).toBeLessThan(20);
    expect(skipped).toHaveLength(1);
    expect(skipped[0]!.errorMs).toBeGreaterThan(150);
    expect(skipped[0]!.movesMs).toBeGreaterThan(150);
    delay = 0;
    await clock.sync();
    expect(skipped).toHaveLength(1);
    expect(clock.last!.errorMs).toBeLessThan(GOOD_READING_MS);
  });

  it('a failed reading keeps the last offset and is reported', async () => {
    let fail = false;
    const errors: unknown[] = [];
    const clock = new SyncedClock(
      async () => {
        if (fail) throw new Error('database away');
        return Date.now() - 5000;
      },
      10,
      (e) => errors.push(e),
    );
    await clock.start();
    fail = true;
    await new Promise((r) => setTimeout(r, 40));
    clock.stop();
    expect(errors.length).toBeGreaterThan(0);
    expect(Math.abs(clock.now() - (Date.now() - 5000))).toBeLessThan(50);
  });
});
