import { describe, expect, it } from 'vitest';
import { PoolHistory } from './pool-history.js';

const sample = (at: number) => ({
  at,
  pools: [{ pool: 'cpu', queued: at, oldestWaitSeconds: null, cpuAllocated: 0, cpuTotal: 1000, gpusAllocated: 0, gpusTotal: 0 }],
});

describe('PoolHistory', () => {
  it('keeps samples for its window, oldest first, and answers those after a time', () => {
    const h = new PoolHistory(10, 100);
    for (let at = 0; at <= 250; at += 10) h.add(sample(at));
    expect(h.since().map((s) => s.at)).toEqual([150, 160, 170, 180, 190, 200, 210, 220, 230, 240, 250]);
    expect(h.since(225).map((s) => s.at)).toEqual([230, 240, 250]);
    expect(h.since(250)).toEqual([]);
  });
});
