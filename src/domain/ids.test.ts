import { describe, expect, it } from 'vitest';
import { newId } from './ids.js';

describe('newId', () => {
  it('ascends within one millisecond and across milliseconds, per kind', () => {
    const t = 1_700_000_000_000;
    const ids = [...Array.from({ length: 1000 }, () => newId('job', t)), newId('job', t + 1), newId('job', t + 1)];
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids[0]).toMatch(/^job_[0-9a-hjkmnp-tv-z]{20}$/);
  });
});
