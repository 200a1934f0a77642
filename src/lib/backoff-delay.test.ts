import { describe, expect, it } from 'vitest';
import { backoffDelay, EQUAL_JITTER } from './backoff-delay.js';

describe('backoffDelay', () => {
  it('doubles from the base with each failure, up to the cap', () => {
    const b = { baseMs: 250, maxMs: 4000 };
    expect([1, 2, 3, 4, 5, 6, 100].map((n) => backoffDelay(b, n))).toEqual([250, 500, 1000, 2000, 4000, 4000, 4000]);
  });

  it('treats n below 1 as the first retry and survives absurd counts', () => {
    const b = { baseMs: 100, maxMs: 1000 };
    expect(backoffDelay(b, 0)).toBe(100);
    expect(backoffDelay(b, -3)).toBe(100);
    expect(backoffDelay(b, 1e9)).toBe(1000);
    expect(backoffDelay({ baseMs: 0, maxMs: 1000 }, 5000)).toBe(0);
  });

  it('equal jitter: between half the nominal delay and all of it', () => {
    const b = { baseMs: 4000, maxMs: 60_000, jitter: EQUAL_JITTER };
    expect(backoffDelay(b, 1, 0)).toBe(2000);
    expect(backoffDelay(b, 1, 0.5)).toBe(3000);
    expect(backoffDelay(b, 1, 0.999_999)).toBe(4000);
  });

  it('a centred jitter can go above the nominal delay, and the cap applies before it', () => {
    const b = { baseMs: 1000, maxMs: 15_000, jitter: [0.75, 1.25] as const };
    expect(backoffDelay(b, 1, 0)).toBe(750);
    expect(backoffDelay(b, 1, 1)).toBe(1250);
    expect(backoffDelay(b, 10, 1)).toBe(18_750);
  });

  it('clamps a random number outside [0, 1] and rounds to whole milliseconds', () => {
    const b = { baseMs: 3, maxMs: 50, jitter: EQUAL_JITTER };
    expect(backoffDelay(b, 1, -1)).toBe(2); // 1.5 rounds up
    expect(backoffDelay(b, 1, 7)).toBe(3);
  });
});
