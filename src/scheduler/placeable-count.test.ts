import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { stageNeed } from './checks.js';
import { gangNeedOf, type GangNeed } from './gang-placer.js';
import { gangHeadsToRead, gangPlaceableCount, headsToRead, placeableCount } from './placeable-count.js';
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

describe('gangs: whole gangs, on distinct machines', () => {
  const gang = (size: number, gpu: { count: number; types: string[] } | null, sameLabel?: string): GangNeed =>
    gangNeedOf({
      resources: { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu, machines: size },
      placement: { region: null, labels: {}, ...(sameLabel ? { sameLabel } : {}) },
    })!;
  const h100 = (free: number, all = 8) => Array.from({ length: all }, (_, i) => ({ type: 'h100', free: i < free }));

  it('counts gangs, not members: 4 machines with one free GPU each take one gang of 4 (the member room says 4)', () => {
    const machines = ['a', 'b', 'c', 'd'].map((n) => machine(n, 64_000, h100(1)));
    expect(placeableCount(gang(4, { count: 1, types: ['h100'] }).member, machines, 1000)).toBe(4);
    expect(gangPlaceableCount(gang(4, { count: 1, types: ['h100'] }), machines, 1000)).toBe(1);
    expect(gangPlaceableCount(gang(2, { count: 1, types: ['h100'] }), machines, 1000)).toBe(2);
    // One machine with 8 free GPUs is still one member's machine: a gang of 2 needs two.
    expect(gangPlaceableCount(gang(2, { count: 1, types: ['h100'] }), [machine('a', 64_000, h100(8))], 1000)).toBe(0);
    // Two machines of 8 free: 8 gangs of 2 × 1 GPU (a member of each on each machine), capped.
    const two = [machine('a', 64_000, h100(8)), machine('b', 64_000, h100(8))];
    expect(gangPlaceableCount(gang(2, { count: 1, types: ['h100'] }), two, 1000)).toBe(8);
    expect(gangPlaceableCount(gang(2, { count: 1, types: ['h100'] }), two, 3)).toBe(3);
    // Rooms 8, 1, 1 for gangs of 3: one gang (each needs a member on all three machines).
    const uneven = [machine('a', 64_000, h100(8)), machine('b', 64_000, h100(1)), machine('c', 64_000, h100(1))];
    expect(gangPlaceableCount(gang(3, { count: 1, types: ['h100'] }), uneven, 1000)).toBe(1);
  });

  it('counts within one sameLabel value: 2 racks of 2 machines take no gang of 3', () => {
    const machines = ['a', 'b', 'c', 'd'].map((n, i) => machine(n, 64_000, h100(8), { labels: { rack: i < 2 ? 'r1' : 'r2' } }));
    expect(gangPlaceableCount(gang(3, { count: 8, types: ['h100'] }, 'rack'), machines, 1000)).toBe(0);
    expect(gangPlaceableCount(gang(2, { count: 8, types: ['h100'] }, 'rack'), machines, 1000)).toBe(2);
    expect(gangPlaceableCount(gang(3, { count: 8, types: ['h100'] }), machines, 1000)).toBe(1);
  });

  it("reads a gang's head whenever a set could take it idle, whatever its members' size; nothing when none could", () => {
    const full = ['a', 'b'].map((n) => machine(n, 64_000, h100(0, 1)));
    // A gang of 1-GPU members on a full cluster: the head is read (it is held its set).
    expect(headsToRead(gang(2, { count: 1, types: ['h100'] }).member, full, 1000)).toBe(0);
    expect(gangHeadsToRead(gang(2, { count: 1, types: ['h100'] }), full, 1000)).toBe(1);
    // A CPU gang on busy machines, too.
    const busy = ['a', 'b'].map((n) => machine(n, 8000, [], { cpuMillisFree: 0 }));
    expect(gangHeadsToRead(gang(2, null), busy, 1000)).toBe(1);
    // Too few machines, even idle: nothing.
    expect(gangHeadsToRead(gang(3, { count: 1, types: ['h100'] }), full, 1000)).toBe(0);
    expect(gangHeadsToRead(gang(2, { count: 1, types: ['a100'] }), full, 1000)).toBe(0);
    // Machines in two racks of one: no set of 2 in one rack.
    const racked = full.map((m, i) => ({ ...m, labels: { rack: `r${i}` } }));
    expect(gangHeadsToRead(gang(2, { count: 1, types: ['h100'] }, 'rack'), racked, 1000)).toBe(0);
  });

  it('is never below how many gangs of one shape the planner places (so reading that deep loses nothing)', () => {
    const gpuTypes = ['a100', 'h100'];
    const arb = fc.record({
      machines: fc.array(
        fc.record({
          cpu: fc.integer({ min: 4, max: 16 }).map((c) => c * 1000),
          free: fc.integer({ min: 2, max: 16 }).map((c) => c * 1000),
          // Mostly free GPUs, so that gangs are placed in most runs.
          gpus: fc.array(fc.record({ type: fc.constantFrom(...gpuTypes), free: fc.integer({ min: 0, max: 3 }).map((x) => x > 0) }), {
            minLength: 2,
            maxLength: 8,
          }),
          rack: fc.constantFrom('r1', 'r2'),
        }),
        { minLength: 2, maxLength: 8 },
      ),
      size: fc.integer({ min: 2, max: 4 }),
      cpu: fc.integer({ min: 1, max: 8 }).map((c) => c * 500),
      gpuCount: fc.integer({ min: 0, max: 2 }),
      types: fc.subarray(gpuTypes),
      sameLabel: fc.boolean(),
    });
    fc.assert(
      fc.property(arb, (p) => {
        const machines = p.machines.map((m, i) => machine(`m${i}`, m.cpu, m.gpus, { cpuMillisFree: Math.min(m.cpu, m.free), labels: { rack: m.rack } }));
        const gpu = p.gpuCount > 0 ? { count: p.gpuCount, types: p.types } : null;
        const queue = Array.from({ length: 20 }, (_, i) => {
          const s = stage(i, p.cpu, gpu);
          return { ...s, resources: { ...s.resources, machines: p.size }, placement: { ...s.placement, ...(p.sameLabel ? { sameLabel: 'rack' } : {}) } };
        });
        const placed = planPlacements({ machines, queue }, { gangs: true }).placements.length;
        expect(gangPlaceableCount(gangNeedOf(queue[0]!)!, machines, 1000)).toBeGreaterThanOrEqual(placed);
        if (placed > 0) expect(gangHeadsToRead(gangNeedOf(queue[0]!)!, machines, 1000)).toBeGreaterThanOrEqual(placed);
      }),
      { numRuns: 300 },
    );
  });
});
