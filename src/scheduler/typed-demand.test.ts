import { describe, expect, it } from 'vitest';
import type { ShareMachine, ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { chooseShare, scoreChoice, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';
import { typedDemandRanks } from './typed-demand.js';

const m = (id: string, type: string, gpus: number, cpu = 64_000): ShareMachine => ({
  id,
  name: id,
  cpuMillisTotal: cpu,
  cpuMillisFree: cpu,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: Array.from({ length: gpus }, (_, index) => ({ index, type, freeMilli: 1000 })),
});
const req = (gpuCount: number, gpuMilli: number, gpuTypes: string[] = [], cpuMillis = 4000): ShareRequest => ({
  cpuMillis,
  memoryBytes: 2 ** 20,
  gpuCount,
  gpuMilli,
  gpuTypes,
});

/*
 * By hand. Cluster: t4 2 machines × 2 GPUs (4000 thousandths), g2 1 × 8 (8000), v100 1 × 4 (4000).
 * Typed shapes: 3 × one whole t4 (3000 over t4's 4000: 0.75); 2 × half a GPU, t4 or g2 (1000 spread
 * over 12000 thousandths: 1000/12000 ≈ 0.083 to each); untyped and CPU-only shapes count for no type.
 *   t4 0.75 + 0.083 = 0.833 → rank 2; g2 0.083 → rank 1; v100 0 → rank 0.
 */
describe('typedDemandRanks', () => {
  const machines = [m('a', 't4', 2), m('b', 't4', 2), m('c', 'g2', 8), m('d', 'v100', 4)];
  const workload = targetWorkload(
    [
      req(1, 1000, ['t4']),
      req(1, 1000, ['t4']),
      req(1, 1000, ['t4']),
      req(1, 500, ['g2', 't4']),
      req(1, 500, ['g2', 't4']),
      req(1, 1000),
      req(1, 1000),
      req(0, 0),
    ],
    1,
  );

  it('ranks types by typed demand over capacity, least first; types without typed demand rank 0', () => {
    expect(Object.fromEntries(typedDemandRanks(machines, workload))).toEqual({ t4: 2, g2: 1, v100: 0 });
    expect(Object.fromEntries(typedDemandRanks(machines, targetWorkload([req(1, 1000), req(0, 0)])))).toEqual({ t4: 0, g2: 0, v100: 0 });
  });

  it('fgd breaks equal points by it for GPU work, fgd-paper by name; CPU-only work by best fit alone', () => {
    /*
     * One request in a hundred wants a whole t4, the others a whole GPU of any type. One whole GPU
     * on an idle 2-GPU machine: on a t4 machine every shape still fits, +0; on the v100 machine the
     * t4 shape loses 1000 it could never use, −1000 / 100 = −10. Points: 100 × sigmoid(0) = 50 and
     * 100 × sigmoid(0.01) = 50.2, both 50: a tie. Ranks: t4 1 (1000 over 4000), v100 0.
     */
    const two = [m('a', 't4', 2), m('b', 't4', 2), m('c', 'v100', 2)];
    const ctx = shareContext(two, targetWorkload([req(1, 1000, ['t4']), ...Array.from({ length: 99 }, () => req(1, 1000))], 1));
    expect(Object.fromEntries(ctx.typedDemand!)).toEqual({ t4: 1, v100: 0 });
    const untyped = req(1, 1000);
    expect(two.map((x) => scoreChoice('fgd', x, untyped, [0], ctx)[0])).toEqual([-50, -50, -50]);
    expect(chooseShare(two, untyped, 'fgd', ctx)?.machine.id).toBe('c');
    expect(chooseShare(two, untyped, 'fgd-paper', ctx)?.machine.id).toBe('a');
    expect(new SharePlanner(two, 'fgd', ctx).choose(untyped)).toEqual({ machineId: 'c', gpuIndices: [0] });
    // 2 × rank + best fit (half the CPU left, half the GPUs left, each over the largest machine's).
    expect(scoreChoice('fgd', two[0]!, untyped, [0], ctx)[1]).toBeCloseTo(2 * 1 + (60 / 64 + 1 / 2) / 2);
    expect(scoreChoice('fgd', two[2]!, untyped, [0], ctx)[1]).toBeCloseTo(2 * 0 + (60 / 64 + 1 / 2) / 2);
    // CPU-only work: best fit alone, whatever the types.
    expect(scoreChoice('fgd', two[0]!, req(0, 0), [], ctx)[1]).toBeCloseTo((60 / 64 + 2 / 2) / 2);
  });
});
