import { describe, expect, it } from 'vitest';
import { takeShare, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { idHash, randomGpuKey, randomMachineKey } from './random-score.js';
import { SharePlanner } from './share-planner.js';
import { chooseShare, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';

const m = (id: string, gpus: number[], cpuFree = 32_000): ShareMachine => ({
  id,
  name: id,
  cpuMillisTotal: 32_000,
  cpuMillisFree: cpuFree,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: gpus.map((freeMilli, index) => ({ index, type: 'g2', freeMilli })),
});
const share = (gpuMilli: number): ShareRequest => ({ cpuMillis: 1000, memoryBytes: 2 ** 20, gpuCount: 1, gpuMilli, gpuTypes: [] });

describe('random, seeded', () => {
  it('keys are in [0, 1), the same for the same seed, draw and machine, and differ otherwise', () => {
    const h = idHash('m1');
    const k = randomMachineKey(42, 7, h);
    expect(k).toBeGreaterThanOrEqual(0);
    expect(k).toBeLessThan(1);
    expect(randomMachineKey(42, 7, h)).toBe(k);
    expect(new Set([k, randomMachineKey(43, 7, h), randomMachineKey(42, 8, h), randomMachineKey(42, 7, idHash('m2'))]).size).toBe(4);
    expect(randomGpuKey(42, 7, h, 0)).not.toBe(randomGpuKey(42, 7, h, 1));
  });

  it('chooses each fitting machine about equally often over many draws, never one that does not fit', () => {
    // m4 has no room for the share (CPU full): it is never chosen.
    const machines = [m('m0', [1000]), m('m1', [1000]), m('m2', [1000]), m('m3', [1000]), m('m4', [1000], 0)];
    const ctx = { ...shareContext(machines, targetWorkload([share(500)])), seed: 42 };
    const counts = new Map<string, number>();
    for (let draw = 0; draw < 4000; draw++) {
      const id = chooseShare(machines, share(500), 'random', { ...ctx, draw })!.machine.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect(counts.has('m4')).toBe(false);
    // Binomial(4000, ¼): σ ≈ 27; ±150 is more than 5σ.
    for (const id of ['m0', 'm1', 'm2', 'm3']) expect(Math.abs(counts.get(id)! - 1000)).toBeLessThan(150);
  });

  it('draws the GPU among those with room, each about equally often, like the simulator (not by type and room)', () => {
    // GPUs 0–2 idle, 3 with 200 free: a share of 500 may take 0, 1 or 2, a third each.
    const machines = [m('m', [1000, 1000, 1000, 200])];
    const ctx = shareContext(machines, targetWorkload([share(500)]));
    const counts = [0, 0, 0, 0];
    for (let draw = 0; draw < 3000; draw++) counts[chooseShare(machines, share(500), 'random', { ...ctx, draw })!.gpuIndices[0]!]! += 1;
    expect(counts[3]).toBe(0);
    for (const c of counts.slice(0, 3)) expect(Math.abs(c - 1000)).toBeLessThan(150);
  });

  it("the planner's n-th choice is chooseShare's with draw n, from the context's draw on", () => {
    const machines = [m('a', [1000, 1000]), m('b', [1000, 1000]), m('c', [1000, 1000])];
    const ctx = { ...shareContext(machines, targetWorkload([share(250)])), seed: 9, draw: 100 };
    const planner = new SharePlanner(machines, 'random', ctx);
    const copy = machines.map((x) => ({ ...x, gpus: x.gpus.map((g) => ({ ...g })) }));
    for (let i = 0; i < 12; i++) {
      const want = chooseShare(copy, share(250), 'random', { ...ctx, draw: 100 + i });
      const got = planner.place(share(250));
      expect(got).toEqual(want === null ? null : { machineId: want.machine.id, gpuIndices: want.gpuIndices });
      if (want !== null) takeShare(want.machine, share(250), want.gpuIndices);
    }
  });
});
