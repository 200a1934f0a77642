import { describe, expect, it } from 'vitest';
import { stageShape } from './stage-shape.js';
import type { Placement, Resources } from './resources.js';

const placement: Placement = { region: null, labels: {} };
const res = (gpu: Resources['gpu']): Resources => ({ cpuMillis: 1000, memoryBytes: 2 ** 29, gpu });

describe('stageShape with shares of a GPU', () => {
  it('tells a share from a whole GPU, shares apart, and a GPU memory bound apart', () => {
    const whole = stageShape(res({ count: 1, types: ['h100'] }), placement);
    const quarter = stageShape(res({ count: 1, milli: 250, types: ['h100'] }), placement);
    const half = stageShape(res({ count: 1, milli: 500, types: ['h100'] }), placement);
    const halfMem = stageShape(res({ count: 1, milli: 500, memoryBytes: 10 * 2 ** 30, types: ['h100'] }), placement);
    const halfMem2 = stageShape(res({ count: 1, milli: 500, memoryBytes: 20 * 2 ** 30, types: ['h100'] }), placement);
    expect(new Set([whole, quarter, half, halfMem, halfMem2]).size).toBe(5);
  });

  it('keeps the shape of whole-GPU stages as it was (milli 1000 is a whole GPU)', () => {
    // The key stored before shares existed: a whole GPU written with or without milli is one shape.
    expect(stageShape(res({ count: 2, milli: 1000, types: ['a100'] }), placement)).toBe(stageShape(res({ count: 2, types: ['a100'] }), placement));
  });
});

/** The shape of 8 h100 GPUs, 1 CPU, 512 MiB, computed before gangs existed. */
const STORED_BEFORE_GANGS = 'sh_34KnRMrTHMVGN9f2ZGxjdA';

describe('stageShape of gangs (issue 31)', () => {
  const gpu = { count: 8, types: ['h100'] };
  it('tells a gang from the same request on one machine, sizes apart and sameLabel apart', () => {
    const one = stageShape(res(gpu), placement);
    const four = stageShape({ ...res(gpu), machines: 4 }, placement);
    const two = stageShape({ ...res(gpu), machines: 2 }, placement);
    const fourRack = stageShape({ ...res(gpu), machines: 4 }, { ...placement, sameLabel: 'rack' });
    const fourZone = stageShape({ ...res(gpu), machines: 4 }, { ...placement, sameLabel: 'zone' });
    expect(new Set([one, four, two, fourRack, fourZone]).size).toBe(5);
  });

  it('keeps the shape of an ordinary stage (machines 1 or absent is one shape, the one stored before gangs)', () => {
    expect(stageShape({ ...res(gpu), machines: 1 }, placement)).toBe(stageShape(res(gpu), placement));
    // The key of before gangs, pinned: a stored shape must not move.
    expect(stageShape(res(gpu), placement)).toBe(STORED_BEFORE_GANGS);
  });
});
