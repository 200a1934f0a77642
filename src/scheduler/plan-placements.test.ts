import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { machineHealths, type MachineHealth } from '../domain/machine-health.js';
import { machineSchedulings, type MachineScheduling } from '../domain/machine-scheduling.js';
import { normalizeGpuType, poolOf, type Resources } from '../domain/resources.js';
import { firstReject, RejectReason, stageNeed } from './checks.js';
import { planPlacements, type PlanOptions } from './plan-placements.js';
import type { GpuView, MachineView, Plan, QueuedStage, SchedulerSnapshot } from './snapshot.js';

const Gi = 1024 ** 3;
const GPU_TYPES = ['a100', 'h100', 'l4'] as const;

// ---------------------------------------------------------------- helpers for example tests

function machine(p: Partial<MachineView> & { name: string }): MachineView {
  const cpu = p.cpuMillisTotal ?? 16_000;
  const mem = p.memoryBytesTotal ?? 64 * Gi;
  return {
    id: p.id ?? `id-${p.name}`,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    gpus: [],
    cpuMillisTotal: cpu,
    memoryBytesTotal: mem,
    cpuMillisFree: cpu,
    memoryBytesFree: mem,
    ...p,
  };
}

function gpus(type: string, n: number, busy: number[] = []): GpuView[] {
  return Array.from({ length: n }, (_, index) => ({ index, type, free: !busy.includes(index) }));
}

function stage(
  stageId: string,
  p: {
    cpu?: number;
    memGi?: number;
    gpu?: Resources['gpu'];
    priority?: number;
    readySince?: number;
    region?: string | null;
    labels?: Record<string, string>;
    allowGpuMachines?: boolean;
  } = {},
): QueuedStage {
  const resources: Resources = { cpuMillis: p.cpu ?? 1000, memoryBytes: (p.memGi ?? 1) * Gi, gpu: p.gpu ?? null };
  return {
    stageId,
    jobId: `job-${stageId}`,
    stageName: stageId,
    pool: poolOf(resources),
    priority: p.priority ?? 0,
    readySince: p.readySince ?? 0,
    resources,
    placement: { region: p.region ?? null, labels: p.labels ?? {}, ...(p.allowGpuMachines ? { allowGpuMachines: true } : {}) },
  };
}

function placementOf(plan: Plan, stageId: string) {
  return plan.placements.find((p) => p.stageId === stageId);
}

function reasonOf(plan: Plan, stageId: string) {
  return plan.pending.find((p) => p.stageId === stageId)?.reason;
}

// ---------------------------------------------------------------- example tests

describe('planPlacements examples', () => {
  it('puts a CPU stage on the CPU machine even when the GPU machine is emptier', () => {
    const plan = planPlacements({
      machines: [
        machine({ name: 'gpu-1', gpus: gpus('h100', 8), cpuMillisTotal: 128_000, memoryBytesTotal: 1024 * Gi }),
        machine({ name: 'cpu-1', cpuMillisFree: 2000, memoryBytesFree: 4 * Gi }),
      ],
      queue: [stage('s1', { cpu: 2000, memGi: 4 })],
    });
    expect(placementOf(plan, 's1')?.machineId).toBe('id-cpu-1');
  });

  it('keeps GPU machines for GPU work: a CPU stage goes there only when it allows it, and says why it waits', () => {
    const machines = [machine({ name: 'gpu-1', gpus: gpus('h100', 8) }), machine({ name: 'cpu-1', cpuMillisFree: 500 })];
    const plan = planPlacements({ machines, queue: [stage('s1', { cpu: 2000 })] });
    expect(plan.placements).toEqual([]);
    expect(plan.pending[0]).toMatchObject({
      reason: expect.stringMatching(/^not enough free CPU\/memory .*: 1 of 1 matching machine busy$/),
      unplaceable: false,
    });
    // With GPU machines alone, it says why.
    const gpuOnly = planPlacements({ machines: [machines[0]!], queue: [stage('s1', { cpu: 2000 })] });
    expect(gpuOnly.pending[0]).toMatchObject({
      reason: 'no ready machine can run it: 1 has GPUs and keeps its CPUs for GPU work (placement.allowGpuMachines: true lets a CPU stage in)',
      unplaceable: true,
    });
    // Allowed: a GPU machine only when no GPU-less machine fits, and only outside its free GPUs'
    // share: with 6 of its 8 GPUs busy, 16 CPUs less 2 × 2 kept for the free ones.
    const busyGpus = [machine({ name: 'gpu-1', gpus: gpus('h100', 8, [0, 1, 2, 3, 4, 5]) }), machine({ name: 'cpu-1', cpuMillisFree: 500 })];
    const allowed = planPlacements({ machines: busyGpus, queue: [stage('s2', { cpu: 2000, allowGpuMachines: true })] });
    expect(placementOf(allowed, 's2')).toMatchObject({ machineId: 'id-gpu-1', gpuIndices: [] });
    const small = planPlacements({ machines: busyGpus, queue: [stage('s3', { cpu: 400, allowGpuMachines: true })] });
    expect(placementOf(small, 's3')).toMatchObject({ machineId: 'id-cpu-1' });
    // An idle GPU machine keeps all of itself for its GPUs, and the stage is told so.
    const idle = planPlacements({ machines: [machines[0]!], queue: [stage('s4', { cpu: 2000, allowGpuMachines: true })] });
    expect(idle.placements).toEqual([]);
    expect(idle.pending[0]).toMatchObject({
      reason: expect.stringMatching(/^waits for GPU work: the GPU machine keeps the CPU and memory that go with its free GPUs/),
      unplaceable: false,
    });
  });

  it("an allowed CPU stage never takes the share of a GPU machine's CPU and memory that goes with its free GPUs", () => {
    // 16 CPUs, 4 GPUs: 4 CPUs go with each GPU. Two GPUs free: 8 CPUs kept for them.
    const m = machine({ name: 'g', cpuMillisTotal: 16_000, cpuMillisFree: 10_000, gpus: gpus('h100', 4, [0, 1]) });
    const fits = planPlacements({ machines: [m], queue: [stage('c', { cpu: 2000, allowGpuMachines: true })] });
    expect(placementOf(fits, 'c')).toBeDefined();
    const tooBig = planPlacements({ machines: [m], queue: [stage('c', { cpu: 3000, allowGpuMachines: true })] });
    expect(tooBig.placements).toEqual([]);
    expect(tooBig.pending[0]!.reason).toMatch(/busy/);
    // The GPU stage that share is kept for still fits.
    const gpuStage = planPlacements({
      machines: [m],
      queue: [stage('c', { cpu: 3000, allowGpuMachines: true }), stage('t', { cpu: 4000, gpu: { count: 1, types: ['h100'] } })],
    });
    expect(placementOf(gpuStage, 't')).toBeDefined();
    // Every GPU busy: all that is free may go to CPU work.
    const allBusy = machine({ name: 'g', cpuMillisTotal: 16_000, cpuMillisFree: 6000, gpus: gpus('h100', 4, [0, 1, 2, 3]) });
    expect(placementOf(planPlacements({ machines: [allBusy], queue: [stage('c', { cpu: 6000, allowGpuMachines: true })] }), 'c')).toBeDefined();
  });

  it('a waiting multi-GPU stage is held the machine nearest to fitting: smaller, later work goes elsewhere', () => {
    // The case: a priority-900 4-GPU stage behind busy GPUs, twelve priority-10 1-GPU stages after it.
    const machines = [machine({ name: 'g4', gpus: gpus('h100', 4, [0, 1]) }), machine({ name: 'g2', gpus: gpus('h100', 2) })];
    const big = stage('big', { gpu: { count: 4, types: ['h100'] }, priority: 900 });
    const small = Array.from({ length: 12 }, (_, i) =>
      stage(`small-${String(i).padStart(2, '0')}`, { gpu: { count: 1, types: ['h100'] }, priority: 10, readySince: 1 }),
    );
    const plan = planPlacements({ machines, queue: [big, ...small] });
    expect(plan.reservations).toEqual([{ stageId: 'big', machineId: 'id-g4' }]);
    // The two free GPUs of g4 stay free for it; g2 takes two small ones.
    expect(plan.placements.map((p) => p.machineId)).toEqual(['id-g2', 'id-g2']);
    expect(plan.pending.find((p) => p.stageId === 'big')).toMatchObject({ unplaceable: false });
    // Work that came before it is not bound by the hold.
    const first = stage('first', { gpu: { count: 1, types: ['h100'] }, priority: 950 });
    const firstG4 = [machine({ name: 'g4', gpus: gpus('h100', 4, [0, 1]) })];
    expect(planPlacements({ machines: firstG4, queue: [first, big] }).placements.map((p) => [p.stageId, p.machineId])).toEqual([['first', 'id-g4']]);
    // A one-GPU stage is held nothing: any GPU freed anywhere serves it.
    expect(
      planPlacements({ machines: [machine({ name: 'g1', gpus: gpus('h100', 1, [0]) })], queue: [stage('one', { gpu: { count: 1, types: ['h100'] } })] })
        .reservations,
    ).toBeUndefined();
  });

  it('assigns the lowest free device indices: 2 GPUs on 4xH100 with 0 and 2 busy get [1,3]', () => {
    const plan = planPlacements({
      machines: [machine({ name: 'g', gpus: gpus('h100', 4, [0, 2]) })],
      queue: [stage('s1', { gpu: { count: 2, types: ['H100'] } })],
    });
    expect(plan.placements).toEqual([{ stageId: 's1', machineId: 'id-g', gpuIndices: [1, 3], cpuMillis: 1000, memoryBytes: Gi }]);
  });

  it('best fit for GPUs (gpuPolicy best-fit): the machine left with the fewest free GPUs; FGD keeps room for the 2-GPU work that waits', () => {
    const snapshot = {
      machines: [
        machine({ name: 'a', gpus: gpus('h100', 8) }),
        machine({ name: 'b', gpus: gpus('h100', 8, [0, 1, 2, 3, 4]) }),
        machine({ name: 'c', gpus: gpus('h100', 4, [0]) }),
      ],
      queue: [stage('s1', { gpu: { count: 2, types: ['h100'] } })],
    };
    expect(placementOf(planPlacements(snapshot, { gpuPolicy: 'best-fit' }), 's1')).toMatchObject({ machineId: 'id-b', gpuIndices: [5, 6] });
    // The target workload is that stage's shape: on b or c it would leave one GPU no 2-GPU stage can use; on a, none.
    expect(placementOf(planPlacements(snapshot), 's1')).toMatchObject({ machineId: 'id-a', gpuIndices: [0, 1] });
  });

  it('a type list ["a100","h100"] takes whichever type fits', () => {
    const machines = [machine({ name: 'a', gpus: gpus('a100', 4, [0, 1, 2]) }), machine({ name: 'h', gpus: gpus('h100', 4) })];
    const queue = [stage('s1', { gpu: { count: 2, types: ['a100', 'h100'] } })];
    expect(placementOf(planPlacements({ machines, queue }), 's1')).toMatchObject({ machineId: 'id-h', gpuIndices: [0, 1] });

    const flipped = [machine({ name: 'a', gpus: gpus('a100', 4) }), machine({ name: 'h', gpus: gpus('h100', 4, [0, 1, 2]) })];
    expect(placementOf(planPlacements({ machines: flipped, queue }), 's1')).toMatchObject({ machineId: 'id-a', gpuIndices: [0, 1] });
  });

  it('never mixes GPU types on one machine', () => {
    const mixed = machine({
      name: 'mixed',
      gpus: [
        { index: 0, type: 'a100', free: true },
        { index: 1, type: 'h100', free: true },
      ],
    });
    const plan = planPlacements({ machines: [mixed], queue: [stage('s1', { gpu: { count: 2, types: [] } })] });
    expect(plan.placements).toEqual([]);
    expect(reasonOf(plan, 's1')).toBe('no ready machine can run it: 1 lacks 2 GPUs');
  });

  it('respects candidateLimit: stops after that many feasible machines', () => {
    const machines = [
      machine({ name: 'a' }),
      machine({ name: 'b' }),
      machine({ name: 'c', cpuMillisFree: 2000 }), // the best fit, but third in scan order
    ];
    const queue = [stage('s1', { cpu: 2000 })];
    expect(placementOf(planPlacements({ machines, queue }), 's1')?.machineId).toBe('id-c');
    expect(placementOf(planPlacements({ machines, queue }, { candidateLimit: 2 }), 's1')?.machineId).toBe('id-a');
  });

  it('orders by priority, then age, then id, over one shrinking copy of capacity', () => {
    const plan = planPlacements({
      machines: [machine({ name: 'm', cpuMillisTotal: 4000, cpuMillisFree: 4000 })],
      queue: [
        stage('low', { cpu: 2000, priority: 0 }),
        stage('old', { cpu: 2000, priority: 5, readySince: 1 }),
        stage('new', { cpu: 2000, priority: 5, readySince: 2 }),
        stage('b', { cpu: 2000, priority: 1 }),
      ],
    });
    expect(plan.placements.map((p) => p.stageId)).toEqual(['old', 'new']);
    expect(plan.pending.map((p) => p.stageId)).toEqual(['b', 'low']);
  });

  it('maxPlacements caps a pass; later stages are not reported', () => {
    const plan = planPlacements({ machines: [machine({ name: 'm' })], queue: [stage('a'), stage('b'), stage('c')] }, { maxPlacements: 2 });
    expect(plan).toEqual({
      placements: [expect.objectContaining({ stageId: 'a' }), expect.objectContaining({ stageId: 'b' })],
      pending: [],
    });
  });

  describe('pending reasons', () => {
    it('all matching GPU machines busy', () => {
      const plan = planPlacements({
        machines: [
          machine({ name: 'g1', gpus: gpus('h100', 8, [0, 1, 2, 3, 4, 5, 6]) }),
          machine({ name: 'g2', gpus: gpus('h100', 4, [0, 1, 2, 3]) }),
          machine({ name: 'g3', gpus: gpus('h100', 2, [1]) }),
        ],
        queue: [stage('s1', { gpu: { count: 2, types: ['h100'] } })],
      });
      expect(reasonOf(plan, 's1')).toBe('no machine with 2 free h100 GPUs: 3 of 3 matching machines busy');
    });

    it('all matching CPU machines busy', () => {
      const plan = planPlacements({
        machines: [
          machine({ name: 'c1', cpuMillisFree: 2000 }),
          machine({ name: 'c2', memoryBytesFree: 4 * Gi }),
          machine({ name: 'tiny', cpuMillisTotal: 2000, cpuMillisFree: 2000 }),
        ],
        queue: [stage('s1', { cpu: 4000, memGi: 8 })],
      });
      expect(reasonOf(plan, 's1')).toBe('not enough free CPU/memory (needs 4 CPU, 8Gi): 2 of 2 matching machines busy');
    });

    it('GPUs free but CPU busy names both', () => {
      const plan = planPlacements({
        machines: [machine({ name: 'g', gpus: gpus('h100', 2), cpuMillisFree: 0 })],
        queue: [stage('s1', { cpu: 4000, memGi: 8, gpu: { count: 1, types: ['h100'] } })],
      });
      expect(reasonOf(plan, 's1')).toBe('no machine with 1 free h100 GPU and 4 CPU, 8Gi free: 1 of 1 matching machine busy');
    });

    it('nothing can ever fit: counts per reason, most common first', () => {
      const plan = planPlacements({
        machines: [
          machine({ name: 'cpu', region: 'us-east' }),
          machine({ name: 'one', region: 'us-east', gpus: gpus('h100', 1) }),
          machine({ name: 'eu', region: 'eu-west', gpus: gpus('h100', 8) }),
          machine({ name: 'sus', region: 'us-east', health: 'suspect', gpus: gpus('h100', 8) }),
        ],
        queue: [stage('s1', { region: 'us-east', gpu: { count: 2, types: ['h100'] } })],
      });
      expect(reasonOf(plan, 's1')).toBe('no ready machine can run it: 2 lack 2 h100 GPUs, 1 in another region (wants us-east), 1 suspect');
    });

    it('labels and totals', () => {
      const plan = planPlacements({
        machines: [
          machine({ name: 'a', labels: { zone: 'b' } }),
          machine({ name: 'b', labels: { zone: 'a' }, cpuMillisTotal: 1000, cpuMillisFree: 1000 }),
          machine({ name: 'c', labels: { zone: 'a' }, memoryBytesTotal: Gi, memoryBytesFree: Gi }),
          machine({ name: 'd', labels: { zone: 'a' }, scheduling: 'cordoned' }),
          machine({ name: 'e', labels: { zone: 'a' }, scheduling: 'draining' }),
          machine({ name: 'f', labels: { zone: 'a' }, scheduling: 'cordoned', health: 'lost' }),
        ],
        queue: [stage('s1', { cpu: 2000, memGi: 2, labels: { zone: 'a' } })],
      });
      // A lost machine is reported lost whatever the operator wants of it.
      expect(reasonOf(plan, 's1')).toBe(
        'no ready machine can run it: 1 too small for 2 CPU, 1 too small for 2Gi memory, 1 lacks label zone=a, 1 lost, 1 cordoned, 1 draining',
      );
    });

    it('no machines registered', () => {
      const plan = planPlacements({ machines: [], queue: [stage('s1')] });
      expect(plan.pending).toEqual([{ stageId: 's1', reason: 'no machines registered', unplaceable: true }]);
    });
  });

  it('exposes per-machine reject codes for explain', () => {
    const need = stageNeed(stage('s1', { gpu: { count: 2, types: ['h100'] } }));
    expect(firstReject(need, machine({ name: 'x' }))).toBe(RejectReason.gpuType);
    expect(firstReject(need, machine({ name: 'x', gpus: gpus('h100', 1) }))).toBe(RejectReason.gpuTotal);
    expect(firstReject(need, machine({ name: 'x', gpus: gpus('h100', 2, [0]) }))).toBe(RejectReason.gpuBusy);
    expect(firstReject(need, machine({ name: 'x', gpus: gpus('H100', 2) }))).toBeNull();
  });
});

// ---------------------------------------------------------------- generators

const healthArb: fc.Arbitrary<MachineHealth> = fc.oneof(
  { weight: 5, arbitrary: fc.constant<MachineHealth>('ready') },
  { weight: 1, arbitrary: fc.constantFrom(...machineHealths) },
);
const schedulingArb: fc.Arbitrary<MachineScheduling> = fc.oneof(
  { weight: 5, arbitrary: fc.constant<MachineScheduling>('eligible') },
  { weight: 1, arbitrary: fc.constantFrom(...machineSchedulings) },
);
const labelsArb = fc.record({ zone: fc.constantFrom('a', 'b'), team: fc.constantFrom('ml', 'infra') }, { requiredKeys: [] }).map((l) => ({ ...l }));
const gpuTypeArb = fc.constantFrom(...GPU_TYPES);

const gpusArb: fc.Arbitrary<GpuView[]> = fc.oneof(
  { weight: 2, arbitrary: fc.constant<GpuView[]>([]) },
  {
    // A uniform machine: one type, some devices busy.
    weight: 3,
    arbitrary: fc
      .tuple(gpuTypeArb, fc.array(fc.boolean(), { minLength: 1, maxLength: 8 }))
      .map(([type, frees]) => frees.map((free, index) => ({ index, type, free }))),
  },
  {
    // Mixed types, upper-case spellings, and non-contiguous indices.
    weight: 1,
    arbitrary: fc
      .array(fc.record({ type: fc.constantFrom('a100', 'H100', 'l4'), free: fc.boolean(), gap: fc.integer({ min: 1, max: 2 }) }), {
        minLength: 1,
        maxLength: 6,
      })
      .map((gs) => {
        let index = -1;
        return gs.map((g) => ({ index: (index += g.gap), type: g.type, free: g.free }));
      }),
  },
);

const machineArb = fc
  .record({
    name: fc.constantFrom('m-a', 'm-b', 'm-c', 'm-d', 'm-e'),
    health: healthArb,
    scheduling: schedulingArb,
    region: fc.constantFrom<string | null>(null, 'us-east', 'eu-west'),
    labels: labelsArb,
    cores: fc.integer({ min: 1, max: 32 }),
    cpuFreeQuarters: fc.integer({ min: 0, max: 4 }),
    memGi: fc.integer({ min: 1, max: 128 }),
    memFreeQuarters: fc.integer({ min: 0, max: 4 }),
    gpus: gpusArb,
  })
  .map((m) => ({
    name: m.name,
    health: m.health,
    scheduling: m.scheduling,
    region: m.region,
    labels: m.labels,
    cpuMillisTotal: m.cores * 1000,
    cpuMillisFree: (m.cores * 1000 * m.cpuFreeQuarters) / 4,
    memoryBytesTotal: m.memGi * Gi,
    memoryBytesFree: (m.memGi * Gi * m.memFreeQuarters) / 4,
    gpus: m.gpus,
  }));

const stageArb = fc
  .record({
    priority: fc.integer({ min: 0, max: 3 }),
    readySince: fc.integer({ min: 0, max: 5 }),
    cpu: fc.constantFrom(250, 500, 1000, 2000, 4000, 8000, 16000),
    memMi: fc.constantFrom(512, 1024, 2048, 4096, 8192, 16384, 65536),
    gpu: fc.oneof(
      { weight: 2, arbitrary: fc.constant(null) },
      {
        weight: 3,
        arbitrary: fc.record({
          count: fc.integer({ min: 0, max: 4 }),
          types: fc.subarray([...GPU_TYPES]).chain((ts) => fc.tuple(...ts.map((t) => fc.constantFrom(t, t.toUpperCase())))),
        }),
      },
    ),
    region: fc.constantFrom<string | null>(null, null, null, 'us-east', 'eu-west'),
    labels: fc.oneof({ weight: 3, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: labelsArb }),
    allowGpuMachines: fc.boolean(),
  })
  .map((s) => {
    const resources: Resources = { cpuMillis: s.cpu, memoryBytes: s.memMi * 1024 ** 2, gpu: s.gpu };
    const placement = { region: s.region, labels: s.labels, ...(s.allowGpuMachines ? { allowGpuMachines: true } : {}) };
    return { resources, placement, priority: s.priority, readySince: s.readySince };
  });

const snapshotArb: fc.Arbitrary<SchedulerSnapshot> = fc
  .record({ machines: fc.array(machineArb, { maxLength: 8 }), queue: fc.array(stageArb, { maxLength: 16 }) })
  .map(({ machines, queue }) => ({
    // Ids are unique but not in name order, so ties by name fall to id.
    machines: machines.map((m, i) => ({ id: `mach-${(i * 7) % 11}-${i}`, ...m })),
    queue: queue.map((s, i) => ({
      stageId: `s-${String(i).padStart(2, '0')}`,
      jobId: `j-${i % 3}`,
      stageName: `stage-${i}`,
      pool: poolOf(s.resources),
      ...s,
    })),
  }));

const optsArb: fc.Arbitrary<PlanOptions> = fc.record(
  { maxPlacements: fc.integer({ min: 0, max: 8 }), candidateLimit: fc.integer({ min: 1, max: 4 }) },
  { requiredKeys: [] },
);

const RUNS = { numRuns: 500 };

// ---------------------------------------------------------------- properties

/** The scheduling order, restated independently of the implementation. */
const inOrder = (q: readonly QueuedStage[]) =>
  [...q].sort((a, b) =>
    a.priority !== b.priority ? b.priority - a.priority : a.readySince !== b.readySince ? a.readySince - b.readySince : a.stageId.localeCompare(b.stageId),
  );
const gpuCount = (s: QueuedStage) => (s.resources.gpu && s.resources.gpu.count > 0 ? s.resources.gpu.count : 0);
const gpuTypes = (s: QueuedStage) => new Set((s.resources.gpu?.types ?? []).map(normalizeGpuType));

describe('planPlacements properties', () => {
  it('never over-allocates CPU, memory or GPUs', () => {
    fc.assert(
      fc.property(snapshotArb, optsArb, (snap, opts) => {
        const plan = planPlacements(snap, opts);
        const byId = new Map(snap.machines.map((m) => [m.id, m]));
        const stages = new Map(snap.queue.map((s) => [s.stageId, s]));
        const used = new Map<string, { cpu: number; mem: number; gpus: Set<number> }>();
        for (const p of plan.placements) {
          const m = byId.get(p.machineId);
          const s = stages.get(p.stageId);
          expect(m).toBeDefined();
          expect(s).toBeDefined();
          if (!m || !s) return;
          expect(p.cpuMillis).toBe(s.resources.cpuMillis);
          expect(p.memoryBytes).toBe(s.resources.memoryBytes);
          const u = used.get(m.id) ?? { cpu: 0, mem: 0, gpus: new Set<number>() };
          u.cpu += p.cpuMillis;
          u.mem += p.memoryBytes;
          expect(p.gpuIndices.length).toBe(gpuCount(s));
          expect(p.gpuIndices).toEqual([...p.gpuIndices].sort((a, b) => a - b));
          const types = new Set<string>();
          for (const i of p.gpuIndices) {
            const g = m.gpus.find((d) => d.index === i);
            expect(g?.free).toBe(true);
            expect(u.gpus.has(i)).toBe(false);
            u.gpus.add(i);
            const t = normalizeGpuType(g?.type ?? '');
            const wanted = gpuTypes(s);
            if (wanted.size > 0) expect(wanted.has(t)).toBe(true);
            types.add(t);
          }
          expect(types.size).toBeLessThanOrEqual(1);
          used.set(m.id, u);
        }
        for (const [id, u] of used) {
          const m = byId.get(id);
          expect(u.cpu).toBeLessThanOrEqual(m?.cpuMillisFree ?? -1);
          expect(u.mem).toBeLessThanOrEqual(m?.memoryBytesFree ?? -1);
        }
      }),
      RUNS,
    );
  });

  it('places only on ready machines matching region and labels', () => {
    fc.assert(
      fc.property(snapshotArb, optsArb, (snap, opts) => {
        const plan = planPlacements(snap, opts);
        for (const p of plan.placements) {
          const m = snap.machines.find((x) => x.id === p.machineId);
          const s = snap.queue.find((x) => x.stageId === p.stageId);
          if (!m || !s) throw new Error('unknown machine or stage in plan');
          expect(m.health).toBe('ready');
          expect(m.scheduling).toBe('eligible');
          if (s.placement.region !== null) expect(m.region).toBe(s.placement.region);
          for (const [k, v] of Object.entries(s.placement.labels)) expect(m.labels[k]).toBe(v);
        }
      }),
      RUNS,
    );
  });

  it('never passes over an earlier stage for a later one that needs as much or more with tighter constraints', () => {
    // Greedy theorem: when H was considered, every machine had at least the capacity it had when
    // L was placed later, so any machine that took L could have taken H.
    const dominates = (l: QueuedStage, h: QueuedStage) => {
      const hr = h.placement;
      const lr = l.placement;
      if (hr.region !== null && hr.region !== lr.region) return false;
      if (!Object.entries(hr.labels).every(([k, v]) => lr.labels[k] === v)) return false;
      if (l.resources.cpuMillis < h.resources.cpuMillis || l.resources.memoryBytes < h.resources.memoryBytes) return false;
      if (gpuCount(h) === 0) return true;
      if (gpuCount(l) < gpuCount(h)) return false;
      const ht = gpuTypes(h);
      const lt = gpuTypes(l);
      return ht.size === 0 || (lt.size > 0 && [...lt].every((t) => ht.has(t)));
    };
    fc.assert(
      fc.property(snapshotArb, optsArb, (snap, opts) => {
        const plan = planPlacements(snap, opts);
        const order = inOrder(snap.queue);
        const rank = new Map(order.map((s, i) => [s.stageId, i]));
        // A CPU stage on a GPU machine is left out: its room there grows as later GPU stages take
        // the GPUs whose share it may not use, so the theorem does not hold for it (by design).
        const onGpuMachine = new Set(
          plan.placements
            .filter((p) => p.gpuIndices.length === 0 && (snap.machines.find((m) => m.id === p.machineId)?.gpus.length ?? 0) > 0)
            .map((p) => p.stageId),
        );
        const placed = plan.placements.filter((p) => !onGpuMachine.has(p.stageId)).map((p) => order[rank.get(p.stageId) ?? -1]);
        for (const pend of plan.pending) {
          const h = order[rank.get(pend.stageId) ?? -1];
          if (!h) throw new Error('unknown pending stage');
          for (const l of placed) {
            if (!l || (rank.get(l.stageId) ?? -1) < (rank.get(h.stageId) ?? -1)) continue;
            // Nor is a CPU stage comparable with one placed on a GPU machine, where it may not go
            // (or only outside the free GPUs' share).
            const lOn = snap.machines.find((m) => m.id === plan.placements.find((p) => p.stageId === l.stageId)?.machineId);
            if (gpuCount(h) === 0 && (lOn?.gpus.length ?? 0) > 0) continue;
            expect(dominates(l, h), `${l.stageId} placed while ${h.stageId} pending`).toBe(false);
          }
        }
      }),
      RUNS,
    );
  });

  it('accounts for every stage: placed once or pending with a one-line reason', () => {
    fc.assert(
      fc.property(snapshotArb, fc.option(optsArb, { nil: undefined }), (snap, opts) => {
        const plan = planPlacements(snap, opts);
        const max = opts?.maxPlacements ?? 1000;
        const ids = [...plan.placements.map((p) => p.stageId), ...plan.pending.map((p) => p.stageId)];
        expect(new Set(ids).size).toBe(ids.length);
        expect(plan.placements.length).toBeLessThanOrEqual(max);
        for (const p of plan.pending) {
          expect(p.reason.length).toBeGreaterThan(0);
          expect(p.reason).not.toContain('\n');
        }
        const order = inOrder(snap.queue).map((s) => s.stageId);
        if (plan.placements.length < max) {
          expect(new Set(ids)).toEqual(new Set(order));
        } else {
          // The pass stopped at the cap: what was reported is a prefix of the scheduling order.
          expect(new Set(ids)).toEqual(new Set(order.slice(0, ids.length)));
        }
      }),
      RUNS,
    );
  });

  it('leaves nothing placeable pending, and says "busy" only when some machine could take it when idle', () => {
    // Independent of the implementation's checks: does stage s fit machine m with these free amounts?
    const fits = (s: QueuedStage, m: MachineView, cpuFree: number, memFree: number, gpuFree: (g: GpuView) => boolean) => {
      if (m.health !== 'ready' || m.scheduling !== 'eligible') return false;
      if (s.placement.region !== null && s.placement.region !== m.region) return false;
      if (!Object.entries(s.placement.labels).every(([k, v]) => m.labels[k] === v)) return false;
      const n = gpuCount(s);
      if (n === 0 && m.gpus.length > 0) {
        // GPU machines keep their CPUs for GPU work: a CPU stage only when allowed, and outside
        // the share (total / GPUs) of each GPU still free.
        if (!s.placement.allowGpuMachines) return false;
        const freeGpus = m.gpus.filter(gpuFree).length;
        cpuFree -= Math.ceil((m.cpuMillisTotal * freeGpus) / m.gpus.length);
        memFree -= Math.ceil((m.memoryBytesTotal * freeGpus) / m.gpus.length);
      }
      if (cpuFree < s.resources.cpuMillis || memFree < s.resources.memoryBytes) return false;
      if (n === 0) return true;
      const wanted = gpuTypes(s);
      const perType = new Map<string, number>();
      for (const g of m.gpus) {
        const t = normalizeGpuType(g.type);
        if ((wanted.size === 0 || wanted.has(t)) && gpuFree(g)) perType.set(t, (perType.get(t) ?? 0) + 1);
      }
      return [...perType.values()].some((c) => c >= n);
    };
    fc.assert(
      fc.property(snapshotArb, optsArb, (snap, opts) => {
        const plan = planPlacements(snap, opts);
        const byStage = new Map(snap.queue.map((s) => [s.stageId, s]));
        for (const pend of plan.pending) {
          const s = byStage.get(pend.stageId);
          if (!s) throw new Error('unknown pending stage');
          // A machine held for a waiting multi-GPU stage earlier in the order takes nothing after it.
          const order = inOrder(snap.queue).map((q) => q.stageId);
          const heldBefore = new Set((plan.reservations ?? []).filter((r) => order.indexOf(r.stageId) < order.indexOf(s.stageId)).map((r) => r.machineId));
          for (const m of snap.machines) {
            if (heldBefore.has(m.id)) continue;
            const mine = plan.placements.filter((p) => p.machineId === m.id);
            const taken = new Set(mine.flatMap((p) => p.gpuIndices));
            const cpuLeft = m.cpuMillisFree - mine.reduce((a, p) => a + p.cpuMillis, 0);
            const memLeft = m.memoryBytesFree - mine.reduce((a, p) => a + p.memoryBytes, 0);
            // Room for CPU work on a GPU machine grows as the pass gives its GPUs away; the second
            // look that uses it stops at the placement cap like everything else.
            const capped = plan.placements.length >= (opts.maxPlacements ?? 1000);
            if (capped && gpuCount(s) === 0 && taken.size > 0) continue;
            expect(
              fits(s, m, cpuLeft, memLeft, (g) => g.free && !taken.has(g.index)),
              `${s.stageId} fits ${m.id}`,
            ).toBe(false);
          }
          // "When idle" for the machine's CPUs and memory; a CPU stage allowed on a GPU machine fits there
          // once its GPUs are busy, so it is busy there, not unplaceable.
          const couldWhenIdle = snap.machines.some((m) =>
            fits(s, m, m.cpuMillisTotal, m.memoryBytesTotal, (_g) => (gpuCount(s) > 0 || m.gpus.length === 0 ? true : false)),
          );
          if (snap.machines.length === 0) expect(pend.reason).toBe('no machines registered');
          else if (couldWhenIdle) expect(pend.reason).toMatch(/ matching machines? busy$/);
          else expect(pend.reason).toMatch(/^no ready machine can run it: \d+ /);
          // Parked (unplaceable) exactly when no machine could take it even idle.
          expect(pend.unplaceable).toBe(!couldWhenIdle);
        }
      }),
      RUNS,
    );
  });

  it('is deterministic and ignores input order', () => {
    fc.assert(
      fc.property(
        snapshotArb.chain((snap) =>
          fc.record({
            snap: fc.constant(snap),
            machines: fc.shuffledSubarray(snap.machines, { minLength: snap.machines.length }),
            queue: fc.shuffledSubarray(snap.queue, { minLength: snap.queue.length }),
          }),
        ),
        optsArb,
        ({ snap, machines, queue }, opts) => {
          const before = structuredClone(snap);
          const plan = planPlacements(snap, opts);
          expect(snap).toEqual(before); // the snapshot is not mutated
          expect(planPlacements(structuredClone(snap), opts)).toEqual(plan);
          expect(planPlacements({ machines, queue }, opts)).toEqual(plan);
        },
      ),
      RUNS,
    );
  });
});
