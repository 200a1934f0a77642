import { describe, expect, it, vi } from 'vitest';
import { Loop } from './loop.js';

const tick = () => new Promise((r) => setImmediate(r));

describe('Loop', () => {
  it('runs at start, on its interval, and at once when kicked; kicks during a pass coalesce into one more', async () => {
    let passes = 0;
    let release!: () => void;
    let gate: Promise<void> = Promise.resolve();
    const loop = new Loop(
      't',
      async () => {
        passes++;
        await gate;
      },
      60_000,
      (e) => {
        throw e;
      },
    );
    loop.start();
    await tick();
    await tick();
    expect(passes).toBe(1);
    gate = new Promise((r) => (release = r));
    loop.kick();
    await tick();
    await tick();
    expect(passes).toBe(2);
    // Three kicks while the pass is held: exactly one more pass afterwards.
    loop.kick();
    loop.kick();
    loop.kick();
    gate = Promise.resolve();
    release();
    for (let i = 0; i < 5; i++) await tick();
    expect(passes).toBe(3);
    await loop.stop();
    loop.kick();
    await tick();
    expect(passes).toBe(3);
  });

  it('stop() waits for a pass in flight that fails, and does not reject: the failure goes to onError once', async () => {
    let fail!: (e: Error) => void;
    const errors: unknown[] = [];
    const loop = new Loop(
      't',
      () => new Promise<void>((_, reject) => (fail = reject)),
      60_000,
      (e) => errors.push(e),
    );
    loop.start();
    await tick();
    await tick();
    const stopped = loop.stop();
    fail(new Error('not the leader any more'));
    await expect(stopped).resolves.toBeUndefined();
    await tick();
    expect(errors).toHaveLength(1);
  });

  it('a pass that returns a number has its next pass within that many ms; the interval stays the latest', async () => {
    vi.useFakeTimers({ now: 0, toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    try {
      const at: number[] = [];
      const asks = [150, 5000, undefined];
      const loop = new Loop(
        't',
        async () => {
          at.push(Date.now());
          return asks[at.length - 1];
        },
        1000,
        (e) => {
          throw e;
        },
        () => 0.5,
      );
      loop.start();
      for (let t = 0; t < 2500; t += 50) {
        await tick();
        await vi.advanceTimersByTimeAsync(50);
      }
      await loop.stop();
      // At start; 150 ms later as asked; then 5,000 asked, the interval (1,000) sooner; then the interval.
      expect(at.slice(0, 4)).toEqual([0, 150, 1150, 2150]);
    } finally {
      vi.useRealTimers();
    }
  });
});
