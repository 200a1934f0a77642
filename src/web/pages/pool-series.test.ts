import { describe, expect, it } from 'vitest';
import type { PoolSample } from '../../api/contract/pool-view';
import { poolNames, seriesOf } from './pool-series';

const point = (pool: string, over: Partial<PoolSample['pools'][number]> = {}) => ({
  pool,
  queued: 0,
  oldestWaitSeconds: null,
  cpuAllocated: 0,
  cpuTotal: 4000,
  gpusAllocated: 0,
  gpusTotal: 0,
  ...over,
});

describe('the pools charts: a series for what is there now', () => {
  // tpu9 queued a stage and left when it was canceled; gpu:h100's machine left (no GPUs now).
  const samples: PoolSample[] = [
    { at: 1, pools: [point('cpu'), point('gpu:h100', { gpusTotal: 2, gpusAllocated: 1 }), point('gpu:tpu9', { queued: 1, cpuTotal: 0 })] },
    { at: 2, pools: [point('cpu', { queued: 3 }), point('gpu:h100', { gpusTotal: 2 }), point('gpu:tpu9', { queued: 1, cpuTotal: 0 })] },
    { at: 3, pools: [point('cpu', { queued: 1 }), point('gpu:h100', { gpusTotal: 0, cpuTotal: 0 })] },
  ];
  const names = poolNames(samples);

  it('drops a pool gone from the present sample, and one with none of the figure now', () => {
    expect(seriesOf(samples, names, (p) => p.queued).map((s) => s.name)).toEqual(['cpu', 'gpu:h100']);
    expect(seriesOf(samples, names, (p) => (p.gpusTotal ? p.gpusAllocated / p.gpusTotal : null)).map((s) => s.name)).toEqual([]);
  });

  it('keeps the history and the colour of a pool that is still there', () => {
    const [cpu, h100] = seriesOf(samples, names, (p) => p.queued);
    expect(cpu).toEqual({
      name: 'cpu',
      colour: 0,
      points: [
        { t: 1, v: 0 },
        { t: 2, v: 3 },
        { t: 3, v: 1 },
      ],
    });
    expect(h100!.colour).toBe(1);
    expect(names).toEqual(['cpu', 'gpu:h100', 'gpu:tpu9']);
  });
});
