import { describe, expect, it } from 'vitest';
import { bootBackoffUntil } from './boot-backoff.js';

describe('bootBackoffUntil', () => {
  it('none without a failure', () => {
    expect(bootBackoffUntil(0, 5_000)).toBeNull();
    expect(bootBackoffUntil(2, null)).toBeNull();
  });

  it('30 s after the first failure, doubling, capped at 10 minutes', () => {
    expect(bootBackoffUntil(1, 1_000)).toBe(31_000);
    expect(bootBackoffUntil(2, 1_000)).toBe(61_000);
    expect(bootBackoffUntil(3, 1_000)).toBe(121_000);
    expect(bootBackoffUntil(20, 1_000)).toBe(601_000);
  });
});
