import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { gangSizeOf, normalizeGpuType, poolOf, type Resources } from '../domain/resources.js';
import { machineRefusal, stageNeed } from './checks.js';
import { allocationProblem, takeAllocation } from './placement-fit.js';
import { planPlacements } from './plan-placements.js';
import { placementMembers } from './placement-members.js';
import type { MachineView, Plan, QueuedStage, SchedulerSnapshot } from './snapshot.js';

/**
 * Properties of gang placement (issue 31) over random clusters and queues: a gang is placed whole
 * or not at all, its members on distinct machines of one sameLabel value and one GPU type, no GPU
 * taken twice, nothing over capacity, and a gang's hold never overlaps another gang's machines.
 */

const Gi = 1024 ** 3;
const TYPES = ['a100', 'h100'] as const;

const machineArb = (i: number) =>
  fc
    .record({
      type: fc.constantFrom(...TYPES),
      gpuCount: fc.integer({ min: 0, max: 8 }),
      busy: fc.array(fc.integer({ min: 0, max: 7 }), { maxLength: 4 }),
      rack: fc.constantFrom(undefined, 'r1', 'r1', 'r2'),
      cpuTotal: fc.integer({ min: 8, max: 64 }),
      cpuUsed: fc.integer({ min: 0, max: 16 }),
      health: fc.constantFrom('ready', 'ready', 'ready', 'ready', 'suspect' as const),
    })
    .map((r): MachineView => ({
      id: `id-${i}`,
      name: `m-${String(i).padStart(2, '0')}`,
      health: r.health,
      scheduling: 'eligible',
      region: null,
      labels: r.rack === undefined ? {} : { rack: r.rack },
      gpus: Array.from({ length: r.gpuCount }, (_, index) => ({ index, type: r.type, free: !r.busy.includes(index) })),
      cpuMillisTotal: r.cpuTotal * 1000,
      cpuMillisFree: Math.max(0, r.cpuTotal - r.cpuUsed) * 1000,
      memoryBytesTotal: 256 * Gi,
      memoryBytesFree: 256 * Gi,
    }));

const clusterArb = fc.integer({ min: 1, max: 10 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => machineArb(i))));

const stageArb = (i: number) =>
  fc
    .record({
      machines: fc.constantFrom(1, 1, 2, 3, 4),
      gpu: fc.option(fc.record({ count: fc.integer({ min: 1, max: 8 }), types: fc.constantFrom<string[]>([], ['a100'], ['h100'], ['a100', 'h100']) }), {
        nil: null,
      }),
      cpu: fc.integer({ min: 1, max: 16 }),
      sameLabel: fc.boolean(),
      priority: fc.integer({ min: 0, max: 3 }),
      readySince: fc.integer({ min: 0, max: 5 }),
      allowGpuMachines: fc.boolean(),
    })
    .map((r): QueuedStage => {
      const resources: Resources = { cpuMillis: r.cpu * 1000, memoryBytes: Gi, gpu: r.gpu };
      if (r.machines > 1) resources.machines = r.machines;
      return {
        stageId: `s-${i}`,
        jobId: `j-${i}`,
        stageName: `s-${i}`,
        pool: poolOf(resources),
        priority: r.priority,
        readySince: r.readySince,
        resources,
        placement: {
          region: null,
          labels: {},
          ...(r.machines > 1 && r.sameLabel ? { sameLabel: 'rack' } : {}),
          ...(r.allowGpuMachines && r.gpu === null ? { allowGpuMachines: true } : {}),
        },
      };
    });

const queueArb = fc.integer({ min: 1, max: 8 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => stageArb(i))));

/** Every invariant of a plan with gangs in it, checked against the snapshot it was planned from. */
function checkPlan(snapshot: SchedulerSnapshot, plan: Plan): void {
  const byId = new Map(snapshot.queue.map((s) => [s.stageId, s]));
  const machines = new Map(snapshot.machines.map((m) => [m.id, { ...m, gpus: m.gpus.map((g) => ({ ...g })) }]));
  const ids = plan.placements.map((p) => p.stageId);
  expect(new Set(ids).size).toBe(ids.length);
  // Every stage is placed or waits, once.
  expect([...ids, ...plan.pending.map((p) => p.stageId)].sort()).toEqual([...byId.keys()].sort());

  const gangMachines = new Set<string>();
  for (const p of plan.placements) {
    const stage = byId.get(p.stageId)!;
    const size = gangSizeOf(stage.resources);
    const members = placementMembers(p);
    // All or nothing: a gang's placement has every member, an ordinary one none.
    if (size === 1) expect(p.members).toBeUndefined();
    expect(members).toHaveLength(size);
    expect(members.map((m) => m.rank)).toEqual(members.map((_, i) => i));
    expect(new Set(members.map((m) => m.machineId)).size).toBe(size);
    expect({ machineId: p.machineId, gpuIndices: p.gpuIndices }).toEqual({ machineId: members[0]!.machineId, gpuIndices: members[0]!.gpuIndices });
    const sameLabel = stage.placement.sameLabel;
    if (sameLabel !== undefined) {
      const values = members.map((m) => machines.get(m.machineId)!.labels[sameLabel]);
      expect(values[0]).toBeDefined();
      expect(new Set(values).size).toBe(1);
    }
    const need = stageNeed(stage);
    const types = new Set<string>();
    for (const member of members) {
      const m = machines.get(member.machineId)!;
      expect(machineRefusal(m)).toBeNull();
      // The one fit rule, applied in order: never over capacity, never a GPU twice.
      const a = { cpuMillis: p.cpuMillis, memoryBytes: p.memoryBytes, gpuIndices: member.gpuIndices };
      expect(allocationProblem(m, a, need)).toBeNull();
      takeAllocation(m, a);
      for (const i of member.gpuIndices) types.add(normalizeGpuType(m.gpus.find((g) => g.index === i)!.type));
      if (size > 1) gangMachines.add(m.id);
    }
    expect(types.size).toBeLessThanOrEqual(1);
  }

  const holds = plan.reservations ?? [];
  expect(new Set(holds.map((h) => h.machineId)).size).toBe(holds.length);
  for (const id of new Set(holds.map((h) => h.stageId))) {
    const stage = byId.get(id)!;
    const held = holds.filter((h) => h.stageId === id);
    if (gangSizeOf(stage.resources) > 1) {
      // A gang is held its whole set or nothing, and never a machine another gang took this pass.
      expect(held).toHaveLength(gangSizeOf(stage.resources));
      for (const h of held) expect(gangMachines.has(h.machineId)).toBe(false);
    }
    expect(ids).not.toContain(id);
  }
}

describe('gang placement properties', () => {
  it('never places a gang in part, members never share a machine or a GPU, sameLabel holds, nothing over capacity', () => {
    // What the runs covered (the seed is random): a property that never saw a gang placed or held proves nothing.
    const seen = { placed: 0, sameLabel: 0, held: 0 };
    fc.assert(
      fc.property(clusterArb, queueArb, (machines, queue) => {
        const snapshot: SchedulerSnapshot = { machines, queue };
        const plan = planPlacements(snapshot, { gangs: true });
        checkPlan(snapshot, plan);
        for (const p of plan.placements) {
          if (!p.members) continue;
          seen.placed += 1;
          if (queue.find((q) => q.stageId === p.stageId)!.placement.sameLabel) seen.sameLabel += 1;
        }
        const gangs = new Set(queue.filter((q) => gangSizeOf(q.resources) > 1).map((q) => q.stageId));
        if ((plan.reservations ?? []).some((r) => gangs.has(r.stageId))) seen.held += 1;
      }),
      { numRuns: 400 },
    );
    // Bounds far below what a run sees (about 60, 17 and 60 of 400), so that no seed fails them.
    expect(seen.placed).toBeGreaterThan(15);
    expect(seen.sameLabel).toBeGreaterThan(2);
    expect(seen.held).toBeGreaterThan(15);
  });

  it('two gangs of 3 on 4 machines: exactly one is placed now, the first by priority then age, and the other holds none of its machines', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: 0, max: 5 }),
        fc.boolean(),
        (gpusEach, pa, pb, ra, rb, sameRack) => {
          // Two members of either never fit on one machine: each takes more than half of its GPUs.
          const take = Math.floor(gpusEach / 2) + 1;
          const machines: MachineView[] = Array.from({ length: 4 }, (_, i) => ({
            id: `id-${i}`,
            name: `m-${i}`,
            health: 'ready',
            scheduling: 'eligible',
            region: null,
            labels: { rack: 'r1' },
            gpus: Array.from({ length: gpusEach }, (_, index) => ({ index, type: 'h100', free: true })),
            cpuMillisTotal: 16_000,
            cpuMillisFree: 16_000,
            memoryBytesTotal: 64 * Gi,
            memoryBytesFree: 64 * Gi,
          }));
          const gang = (id: string, priority: number, readySince: number): QueuedStage => ({
            stageId: id,
            jobId: `job-${id}`,
            stageName: id,
            pool: 'gpu:h100',
            priority,
            readySince,
            resources: { cpuMillis: 1000, memoryBytes: Gi, gpu: { count: take, types: ['h100'] }, machines: 3 },
            placement: { region: null, labels: {}, ...(sameRack ? { sameLabel: 'rack' } : {}) },
          });
          const snapshot: SchedulerSnapshot = { machines, queue: [gang('a', pa, ra), gang('b', pb, rb)] };
          const plan = planPlacements(snapshot, { gangs: true });
          checkPlan(snapshot, plan);
          expect(plan.placements).toHaveLength(1);
          const first = pa !== pb ? (pa > pb ? 'a' : 'b') : ra !== rb ? (ra < rb ? 'a' : 'b') : 'a';
          const won = plan.placements[0]!;
          expect(won.stageId).toBe(first);
          const taken = new Set(placementMembers(won).map((m) => m.machineId));
          for (const r of plan.reservations ?? []) expect(taken.has(r.machineId)).toBe(false);
        },
      ),
      { numRuns: 300 },
    );
  });
});
