import { describe, expect, it } from 'vitest';
import { dotProductPoints } from './dot-product-score.js';
import type { ShareMachine, ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { chooseShare, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';

const m = (id: string, cpuFree: number, gpus: number[]): ShareMachine => ({
  id,
  name: id,
  cpuMillisTotal: 128_000,
  cpuMillisFree: cpuFree,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: gpus.map((freeMilli, index) => ({ index, type: 'g2', freeMilli })),
});
const share = (gpuMilli: number, cpuMillis: number): ShareRequest => ({ cpuMillis, memoryBytes: 2 ** 20, gpuCount: 1, gpuMilli, gpuTypes: [] });

/*
 * By hand, the largest machine 128 cores and 8 GPUs (8000 thousandths), a request of 8 cores and
 * 500 thousandths (0.0625 of each):
 *   a: 64 cores and [1000, 500] free: 0.5·0.0625 + (1500/8000)·0.0625 = 0.04296875;
 *      100 × (1 − 0.04296875 / 2) = 97.85… → 97 points.
 *   b: 128 cores and 8 idle GPUs: 1·0.0625 + 1·0.0625 = 0.125; 100 × (1 − 0.0625) = 93.75 → 93.
 *   c: like a, but [500, 1000] free: 97 points too, and later by name.
 * DotProd takes a (most points; a before c by name) and, on it, the fullest GPU with room: GPU 1.
 */
describe('dotprod on a hand-computed example', () => {
  const a = m('a', 64_000, [1000, 500]);
  const b = m('b', 128_000, [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
  const c = m('c', 64_000, [500, 1000]);
  const r = share(500, 8000);

  it('scores 100 × (1 − (free · asked) / 2), truncated', () => {
    expect(dotProductPoints(a, r, 128_000, 8000)).toBe(97);
    expect(dotProductPoints(b, r, 128_000, 8000)).toBe(93);
    expect(dotProductPoints(c, r, 128_000, 8000)).toBe(97);
  });

  it('takes the machine with most points, the first by name among equals, and its fullest GPU; the planner agrees', () => {
    const ctx = shareContext([a, b, c], targetWorkload([r]));
    expect(ctx).toMatchObject({ maxCpuMillis: 128_000, maxGpuMilli: 8000 });
    expect(chooseShare([c, b, a], r, 'dotprod', ctx)).toMatchObject({ machine: { id: 'a' }, gpuIndices: [1] });
    expect(new SharePlanner([c, b, a], 'dotprod', ctx).choose(r)).toEqual({ machineId: 'a', gpuIndices: [1] });
    // On c, the fullest GPU with room is GPU 0.
    expect(chooseShare([c, b], r, 'dotprod', ctx)).toMatchObject({ machine: { id: 'c' }, gpuIndices: [0] });
  });

  it('a request without GPUs weighs CPU alone: the machine with fewer cores free wins', () => {
    const cpuOnly: ShareRequest = { cpuMillis: 16_000, memoryBytes: 2 ** 20, gpuCount: 0, gpuMilli: 0, gpuTypes: [] };
    // a: 1 − 0.5·0.125 / 2 = 0.96875 → 96; b: 1 − 0.125 / 2 = 0.9375 → 93.
    expect(dotProductPoints(a, cpuOnly, 128_000, 8000)).toBe(96);
    expect(dotProductPoints(b, cpuOnly, 128_000, 8000)).toBe(93);
  });
});
