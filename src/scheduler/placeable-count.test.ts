import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stageNeed } from './checks.js';
import { headsToRead, placeableCount } from './placeable-count.js';
import { planPlacements } from './plan-placements.js';
import type { MachineView, QueuedStage } from './snapshot.js';

const machine = (id: string, cpu: number, gpus: { type: string; free: boolean }[] = [], over: Partial<MachineView> = {}): MachineView => ({
  id,
  name: id,
  health: 'ready',
  scheduling: 'eligible',
  region: null,
  labels: {},
  cpuMillisTotal: cpu,
  memoryBytesTotal: 2 ** 36,
  cpuMillisFree: cpu,
  memoryBytesFree: 2 ** 36,
  gpus: gpus.map((g, index) => ({ index, ...g })),
  ...over,
});

const stage = (i: number, cpu: number, gpu: { count: number; types: string[] } | null, region: string | null = null): QueuedStage => ({
  stageId: `s${String(i).padStart(4, '0')}`,
  jobId: 'j',
  stageName: `s${i}`,
  pool: 'p',
  priority: 50,
  readySince: i,
  resources: { cpuMillis: cpu, memoryBytes: 2 ** 20, gpu },
  placement: { region, labels: {} },
});

describe('placeableCount', () => {
  it('counts stages that may each take a different GPU type on one machine', () => {
    const m = machine('m', 64_000, [
      { type: 'a100', free: true },
      { type: 'a100', free: true },
      { type: 'h100', free: true },
      { type: 'h100', free: true },
    ]);
    const s = stage(0, 1000, { count: 1, types: ['a100', 'h100'] });
    const queue = Array.from({ length: 10 }, (_, i) => stage(i, 1000, { count: 1, types: ['a100', 'h100'] }));
    expect(placeableCount(stageNeed(s), [m], 1000)).toBe(4);
    expect(planPlacements({ machines: [m], queue }).placements).toHaveLength(4);
  });

  it('is 0 for a stage no machine could ever run, and for a full cluster', () => {
    expect(placeableCount(stageNeed(stage(0, 1000, { count: 1, types: ['tpu'] })), [machine('m', 8000)], 1000)).toBe(0);
    expect(placeableCount(stageNeed(stage(0, 1000, null, 'far')), [machine('m', 8000)], 1000)).toBe(0);
    expect(placeableCount(stageNeed(stage(0, 1000, null)), [machine('m', 8000, [], { cpuMillisFree: 500 })], 1000)).toBe(0);
  });

  it('is never below what the greedy pass places of one shape (so reading that deep loses nothing)', () => {
    const gpuTypes = ['a100', 'h100'];
    const arb = fc.record({
      machines: fc.array(
        fc.record({
          cpu: fc.integer({ min: 0, max: 16 }).map((c) => c * 1000),
          free: fc.integer({ min: 0, max: 16 }).map((c) => c * 1000),
          gpus: fc.array(fc.record({ type: fc.constantFrom(...gpuTypes), free: fc.boolean() }), { maxLength: 8 }),
        }),
        { minLength: 1, maxLength: 6 },
      ),
      cpu: fc.integer({ min: 1, max: 8 }).map((c) => c * 500),
      gpuCount: fc.integer({ min: 0, max: 3 }),
      types: fc.subarray(gpuTypes),
    });
    fc.assert(
      fc.property(arb, (p) => {
        const machines = p.machines.map((m, i) => machine(`m${i}`, m.cpu, m.gpus, { cpuMillisFree: Math.min(m.cpu, m.free) }));
        const gpu = p.gpuCount > 0 ? { count: p.gpuCount, types: p.types } : null;
        const queue = Array.from({ length: 40 }, (_, i) => stage(i, p.cpu, gpu));
        const placed = planPlacements({ machines, queue }).placements.length;
        expect(placeableCount(stageNeed(queue[0]!), machines, 1000)).toBeGreaterThanOrEqual(placed);
      }),
      { numRuns: 300 },
    );
  });
});

describe('headsToRead', () => {
  const gpus = (n: number, busy: number) => Array.from({ length: n }, (_, i) => ({ type: 'h100', free: i >= busy }));
  it('reads the head of a multi-GPU shape that fits nowhere now but would when idle, so it can be held a machine', () => {
    const m = [machine('g4', 8000, gpus(4, 2))];
    expect(headsToRead(stageNeed(stage(1, 1000, { count: 4, types: ['h100'] })), m, 1000)).toBe(1);
    expect(headsToRead(stageNeed(stage(1, 1000, { count: 2, types: ['h100'] })), m, 1000)).toBe(1); // fits now: as placeableCount
    expect(headsToRead(stageNeed(stage(1, 1000, { count: 8, types: ['h100'] })), m, 1000)).toBe(0); // never fits: nothing to hold
    expect(headsToRead(stageNeed(stage(1, 1000, { count: 1, types: ['h100'] })), [machine('g1', 8000, gpus(1, 1))], 1000)).toBe(0); // one GPU: held nothing
  });
});
