import { describe, expect, it } from 'vitest';
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
});
