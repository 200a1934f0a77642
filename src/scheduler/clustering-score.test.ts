import { describe, expect, it } from 'vitest';
import { clusteringPoints } from './clustering-score.js';
import { gpuClassOf, takeShare, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { chooseShare, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';

const m = (id: string, gpus: number[], gpuClasses?: Record<string, number>): ShareMachine => ({
  id,
  name: id,
  cpuMillisTotal: 64_000,
  cpuMillisFree: 64_000,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: gpus.map((freeMilli, index) => ({ index, type: 'g2', freeMilli })),
  ...(gpuClasses === undefined ? {} : { gpuClasses }),
});
const req = (gpuCount: number, gpuMilli: number): ShareRequest => ({ cpuMillis: 1000, memoryBytes: 2 ** 20, gpuCount, gpuMilli, gpuTypes: [] });

/*
 * By hand, the largest machine 8 GPUs (8000 thousandths); within a band, 25 × (8000 − free) / 8000,
 * integer division:
 *   m1: shares only, [500, 1000, 1000, 1000] free (3500): a share 75 + 14 = 89; 2 GPUs 0 + 14 = 14.
 *   m2: a share and a 1-GPU request, [0, 700, 1000, 1000] (2700): share 50 + 16 = 66; 2 GPUs 16.
 *   m3: idle, 8 GPUs (8000): 25 + 0 = 25 for either.
 *   m4: a 2-GPU request, [0, 0, 1000, 1000] (2000): share 0 + 18 = 18; 2 GPUs 75 + 18 = 93.
 */
describe('clustering on a hand-computed example', () => {
  const m1 = m('m1', [500, 1000, 1000, 1000], { share: 2 });
  const m2 = m('m2', [0, 700, 1000, 1000], { share: 1, '1-gpu': 1 });
  const m3 = m('m3', [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000]);
  const m4 = m('m4', [0, 0, 1000, 1000], { '2-gpu': 1 });
  const machines = [m1, m2, m3, m4];
  const ctx = shareContext(machines, targetWorkload([req(1, 300)]));

  it('names kinds of request as the simulator does', () => {
    expect([gpuClassOf(req(1, 300)), gpuClassOf(req(1, 1000)), gpuClassOf(req(2, 1000)), gpuClassOf(req(0, 0))]).toEqual(['share', '1-gpu', '2-gpu', null]);
  });

  it('scores by band, then by how full the machine is', () => {
    expect(machines.map((x) => clusteringPoints(x, req(1, 300), 8000))).toEqual([89, 66, 25, 18]);
    expect(machines.map((x) => clusteringPoints(x, req(2, 1000), 8000))).toEqual([14, 16, 25, 93]);
    expect(machines.map((x) => clusteringPoints(x, req(0, 0), 8000))).toEqual([0, 0, 0, 0]);
  });

  it('puts a share with shares (fullest GPU), 2 GPUs with 2 GPUs, CPU-only work on the first by name; the planner agrees', () => {
    for (const [r, want] of [
      [req(1, 300), { machineId: 'm1', gpuIndices: [0] }],
      [req(2, 1000), { machineId: 'm4', gpuIndices: [2, 3] }],
      [req(0, 0), { machineId: 'm1', gpuIndices: [] }],
    ] as const) {
      const c = chooseShare(machines, r, 'clustering', ctx);
      expect({ machineId: c?.machine.id, gpuIndices: c?.gpuIndices }).toEqual(want);
      expect(new SharePlanner(machines, 'clustering', ctx).choose(r)).toEqual(want);
    }
  });

  it('takeShare counts the kinds placed on a machine, without changing a copy that shares them', () => {
    const a = m('a', [1000, 1000]);
    takeShare(a, req(1, 300), [0]);
    const copy = { ...a };
    takeShare(a, req(1, 300), [0]);
    takeShare(a, req(1, 1000), [1]);
    expect(a.gpuClasses).toEqual({ share: 2, '1-gpu': 1 });
    expect(copy.gpuClasses).toEqual({ share: 1 });
  });
});
