import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fgdPoints, fragmentationIncrease, machineFragmentation, machineFragmentationUnits, shapeFragmentation } from './fgd-score.js';
import type { ShareMachine, ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { chooseShare, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';

const m = (id: string, cpuFree: number, cpuTotal: number, gpus: number[]): ShareMachine => ({
  id,
  name: id,
  cpuMillisTotal: cpuTotal,
  cpuMillisFree: cpuFree,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: gpus.map((freeMilli, index) => ({ index, type: 't4', freeMilli })),
});
const req = (gpuCount: number, gpuMilli: number, cpuMillis: number, gpuTypes: string[] = []): ShareRequest => ({
  cpuMillis,
  memoryBytes: 2 ** 20,
  gpuCount,
  gpuMilli,
  gpuTypes,
});

/*
 * The hand-computed example. Workload: half the requests are A (half a GPU, 4 cores), half are B
 * (one whole GPU, 8 cores). Machines: m1, 16 cores free, GPUs [1000, 300] free; m2, 4 cores free,
 * GPU [600] free.
 *
 *   F(m1): 1300 free. A fits (GPU 0): 1300 − 1000 = 300. B fits (GPU 0): 300. F = ½·300 + ½·300 = 300.
 *   F(m2): 600 free. A fits (600 ≥ 500, 4 ≥ 4 cores): 0. B does not (no idle GPU): 600. F = 300.
 *
 * A request of 300 thousandths and 2 cores:
 *   m1 GPU 0 → [700, 300], 14 cores: A fits on GPU 0: 1000 − 700 = 300; B does not: 1000. F = 650, +350.
 *   m1 GPU 1 → [1000, 0],  14 cores: A and B fit on GPU 0: 0 each. F = 0, −300.
 *   m2 GPU 0 → [300], 2 cores: neither fits: 300 each. F = 300, +0.
 * FGD takes m1 GPU 1 (the cluster's expected fragmentation goes from 600 to 300). Best fit takes
 * m2, whose room the request fills most: ½·2/16 + ½·300/2000 = 0.1375 against m1's 0.6875; it
 * leaves 300 thousandths on m2 that neither A nor B can use.
 */
describe('FGD on a two-machine example computed by hand', () => {
  const workload = targetWorkload([req(1, 500, 4000), req(1, 1000, 8000)], 1);
  const m1 = m('m1', 16_000, 16_000, [1000, 300]);
  const m2 = m('m2', 4000, 4000, [600]);
  const r = req(1, 300, 2000);

  it('weighs the two shapes half and half', () => {
    expect(workload.shapes.map((s) => [s.gpuMilli, s.cpuMillis, s.weight])).toEqual([
      [1000, 8000, 0.5],
      [500, 4000, 0.5],
    ]);
  });

  it('fragmentation of each machine, per shape and weighted', () => {
    const [b, a] = workload.shapes;
    expect(shapeFragmentation(16_000, [1000, 300], ['t4', 't4'], a!)).toBe(300);
    expect(shapeFragmentation(16_000, [1000, 300], ['t4', 't4'], b!)).toBe(300);
    expect(shapeFragmentation(4000, [600], ['t4'], a!)).toBe(0);
    expect(shapeFragmentation(4000, [600], ['t4'], b!)).toBe(600);
    // A shape of another type cannot use the GPUs; a CPU-only shape uses none.
    expect(shapeFragmentation(4000, [600], ['t4'], { ...a!, gpuTypes: ['a10'] })).toBe(600);
    expect(shapeFragmentation(4000, [600], ['t4'], { cpuMillis: 1000, gpuCount: 0, gpuMilli: 0, gpuTypes: [] })).toBe(600);
    // Too few cores: all of it.
    expect(shapeFragmentation(3000, [600], ['t4'], a!)).toBe(600);
    expect(machineFragmentation(m1, workload)).toBe(300);
    expect(machineFragmentation(m2, workload)).toBe(300);
  });

  it('the increase of each choice', () => {
    expect(fragmentationIncrease(m1, r, [0], workload)).toBe(350);
    expect(fragmentationIncrease(m1, r, [1], workload)).toBe(-300);
    expect(fragmentationIncrease(m2, r, [0], workload)).toBe(0);
    // A whole GPU on m1 (GPU 0): [0, 300], 8 cores left: nothing fits, F = 300, +0.
    expect(fragmentationIncrease(m1, req(1, 1000, 8000), [0], workload)).toBe(0);
  });

  it("scores them in the paper's points: 100 × sigmoid(−increase / 1000), truncated", () => {
    expect([-300, 0, 350].map(fgdPoints)).toEqual([57, 50, 41]);
    expect(fgdPoints(-20)).toBe(fgdPoints(0)); // within the same point: best fit decides
  });

  it('fgd takes m1 GPU 1, best fit m2, packing the fullest shared GPU (m1 GPU 1); the planner agrees', () => {
    const expected = { fgd: ['m1', [1]], 'best-fit': ['m2', [0]], packing: ['m1', [1]] } as const;
    for (const [policy, [machineId, gpuIndices]] of Object.entries(expected)) {
      const ctx = shareContext([m1, m2], workload);
      const c = chooseShare([m1, m2], r, policy as keyof typeof expected, ctx);
      expect([c?.machine.id, c?.gpuIndices], policy).toEqual([machineId, gpuIndices]);
      expect(new SharePlanner([m1, m2], policy as keyof typeof expected, ctx).place(r), policy).toEqual({ machineId, gpuIndices });
    }
  });
});

describe('machineFragmentationUnits', () => {
  it('is Σ count × shapeFragmentation, on machines of one or several GPU types', () => {
    const types = ['t4', 'a10'];
    const arbShape = fc.record({
      cpuMillis: fc.integer({ min: 0, max: 16 }).map((c) => c * 1000),
      gpuCount: fc.integer({ min: 0, max: 3 }),
      gpuMilli: fc.constantFrom(100, 300, 500, 1000),
      gpuTypes: fc.subarray(types),
      count: fc.integer({ min: 1, max: 50 }),
    });
    const arbMachine = fc.record({
      cpu: fc.integer({ min: 0, max: 16 }).map((c) => c * 1000),
      gpus: fc.array(fc.record({ type: fc.constantFrom(...types), freeMilli: fc.constantFrom(0, 100, 200, 500, 700, 1000) }), { maxLength: 8 }),
    });
    fc.assert(
      fc.property(fc.array(arbShape, { minLength: 1, maxLength: 6 }), arbMachine, (raw, mm) => {
        const shapes = raw.map((s) => ({ ...s, gpuMilli: s.gpuCount === 0 ? 0 : s.gpuMilli, weight: 0 }));
        const w = { shapes, requests: shapes.reduce((n, s) => n + s.count, 0) };
        const machine: ShareMachine = { ...m('x', mm.cpu, 16_000, []), gpus: mm.gpus.map((g, index) => ({ index, ...g })) };
        const free = machine.gpus.map((g) => g.freeMilli);
        const gpuTypes = machine.gpus.map((g) => g.type);
        const expected = shapes.reduce((f, s) => f + s.count * shapeFragmentation(mm.cpu, free, gpuTypes, s), 0);
        expect(machineFragmentationUnits(machine, w)).toBe(expected);
      }),
      { numRuns: 300 },
    );
  });
});
