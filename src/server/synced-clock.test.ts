import { describe, expect, it } from 'vitest';
import { SyncedClock } from './synced-clock.js';

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
