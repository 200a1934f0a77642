import { describe, expect, it } from 'vitest';
import { poolOf, type Resources } from '../domain/resources.js';
import { chooseGang, gangNeedOf, gangPendingReasonNow } from './gang-placer.js';
import { GANGS_NOT_APPLIED, planPlacements as planAny, type PlanOptions } from './plan-placements.js';
import { placementMembers } from './placement-members.js';
import type { GpuView, MachineView, Plan, QueuedStage, SchedulerSnapshot } from './snapshot.js';

const Gi = 1024 ** 3;

/** Plans as a caller that applies gangs whole does. */
const planPlacements = (snapshot: SchedulerSnapshot, opts: PlanOptions = {}) => planAny(snapshot, { gangs: true, ...opts });

function machine(name: string, p: Partial<MachineView> = {}): MachineView {
  return {
    id: `id-${name}`,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    gpus: [],
    cpuMillisTotal: 64_000,
    memoryBytesTotal: 512 * Gi,
    cpuMillisFree: 64_000,
    memoryBytesFree: 512 * Gi,
    ...p,
  };
}

function gpus(type: string, n: number, busy: number[] = []): GpuView[] {
  return Array.from({ length: n }, (_, index) => ({ index, type, free: !busy.includes(index) }));
}

/** `n` machines of 8 GPUs of `type`, named prefix-1…n, with labels. */
function rack(prefix: string, n: number, labels: Record<string, string> = {}, type = 'h100'): MachineView[] {
  return Array.from({ length: n }, (_, i) => machine(`${prefix}-${i + 1}`, { gpus: gpus(type, 8), labels }));
}

function stage(
  stageId: string,
  p: { machines?: number; gpu?: Resources['gpu']; cpu?: number; sameLabel?: string; priority?: number; readySince?: number; timeoutSeconds?: number } = {},
): QueuedStage {
  const resources: Resources = { cpuMillis: p.cpu ?? 1000, memoryBytes: Gi, gpu: p.gpu === undefined ? { count: 8, types: ['h100'] } : p.gpu };
  if (p.machines !== undefined) resources.machines = p.machines;
  return {
    stageId,
    jobId: `job-${stageId}`,
    stageName: stageId,
    pool: poolOf(resources),
    priority: p.priority ?? 50,
    readySince: p.readySince ?? 0,
    resources,
    placement: { region: null, labels: {}, ...(p.sameLabel !== undefined ? { sameLabel: p.sameLabel } : {}) },
    ...(p.timeoutSeconds !== undefined ? { timeoutSeconds: p.timeoutSeconds } : {}),
  };
}

const placed = (plan: Plan, stageId: string) => plan.placements.find((p) => p.stageId === stageId);
const reason = (plan: Plan, stageId: string) => plan.pending.find((p) => p.stageId === stageId);
const heldFor = (plan: Plan, stageId: string) => (plan.reservations ?? []).filter((r) => r.stageId === stageId).map((r) => r.machineId);

describe('gang placement: all or nothing (issue 31)', () => {
  it('places every member on its own machine in one placement, rank 0 first and mirrored at the top', () => {
    const plan = planPlacements({ machines: rack('m', 4), queue: [stage('train', { machines: 3 })] });
    expect(plan.placements).toHaveLength(1);
    const p = placed(plan, 'train')!;
    expect(p.members).toEqual([
      { rank: 0, machineId: 'id-m-1', gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] },
      { rank: 1, machineId: 'id-m-2', gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] },
      { rank: 2, machineId: 'id-m-3', gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] },
    ]);
    expect({ machineId: p.machineId, gpuIndices: p.gpuIndices }).toEqual({ machineId: 'id-m-1', gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] });
    expect(p).toMatchObject({ cpuMillis: 1000, memoryBytes: Gi });
    expect(placementMembers(p)).toBe(p.members);
  });

  it('leaves ordinary stages as they were: no members, and placementMembers reads them as one rank 0', () => {
    const plan = planPlacements({ machines: rack('m', 1), queue: [stage('one')] });
    const p = placed(plan, 'one')!;
    expect('members' in p).toBe(false);
    expect(placementMembers(p)).toEqual([{ rank: 0, machineId: 'id-m-1', gpuIndices: [0, 1, 2, 3, 4, 5, 6, 7] }]);
  });

  it('places no member while one is missing, says what it lacks, and holds the whole set against smaller work', () => {
    const machines = [...rack('m', 3), machine('m-4', { gpus: gpus('h100', 8, [0]) }), machine('other', { gpus: gpus('a100', 8) })];
    const plan = planPlacements({
      machines,
      queue: [stage('train', { machines: 4, priority: 90 }), stage('small', { gpu: { count: 1, types: [] }, priority: 10 })],
    });
    expect(placed(plan, 'train')).toBeUndefined();
    expect(reason(plan, 'train')).toEqual({ stageId: 'train', reason: 'needs 4 machines with 8 free h100 GPUs: 3 have them', unplaceable: false });
    expect(heldFor(plan, 'train').sort()).toEqual(['id-m-1', 'id-m-2', 'id-m-3', 'id-m-4']);
    // The small stage behind it goes to the machine the gang cannot use, not to one held for it.
    expect(placed(plan, 'small')).toMatchObject({ machineId: 'id-other' });
  });

  it('is not held a set that cannot take it even idle, and says why', () => {
    const machines = [...rack('m', 2), machine('small-1', { gpus: gpus('h100', 4) }), machine('a-1', { gpus: gpus('a100', 8) })];
    const plan = planPlacements({ machines, queue: [stage('train', { machines: 3 })] });
    expect(reason(plan, 'train')).toEqual({
      stageId: 'train',
      reason: 'needs 3 machines with 8 h100 GPUs: only 2 could run a member even idle; 2 lack 8 h100 GPUs',
      unplaceable: true,
    });
    expect(plan.reservations).toBeUndefined();
  });

  it('places a CPU gang (no GPUs) on CPU machines', () => {
    const machines = [machine('c-1'), machine('c-2'), machine('g-1', { gpus: gpus('h100', 8) })];
    const plan = planPlacements({ machines, queue: [stage('mpi', { machines: 2, gpu: null, cpu: 32_000 })] });
    expect(placed(plan, 'mpi')?.members?.map((m) => m.machineId)).toEqual(['id-c-1', 'id-c-2']);
  });

  it('never puts two members on one machine, even where its GPUs would hold both', () => {
    const plan = planPlacements({ machines: [machine('big', { gpus: gpus('h100', 16) })], queue: [stage('g', { machines: 2 })] });
    expect(placed(plan, 'g')).toBeUndefined();
    expect(reason(plan, 'g')?.reason).toBe('needs 2 machines with 8 h100 GPUs: only 1 could run a member even idle');
  });

  it('takes the best fit: the machines left with the fewest free GPUs', () => {
    const machines = [
      machine('a', { gpus: gpus('h100', 8) }),
      machine('b', { gpus: gpus('h100', 8, [0, 1, 2, 3]) }),
      machine('c', { gpus: gpus('h100', 8, [4, 5, 6, 7]) }),
    ];
    const plan = planPlacements({ machines, queue: [stage('g', { machines: 2, gpu: { count: 4, types: ['h100'] } })] });
    expect(placed(plan, 'g')?.members).toEqual([
      { rank: 0, machineId: 'id-b', gpuIndices: [4, 5, 6, 7] },
      { rank: 1, machineId: 'id-c', gpuIndices: [0, 1, 2, 3] },
    ]);
  });

  it('puts all members on one GPU type, even when it accepts several', () => {
    const machines = [machine('a1', { gpus: gpus('a100', 8) }), machine('h1', { gpus: gpus('h100', 8) }), machine('h2', { gpus: gpus('h100', 8) })];
    const plan = planPlacements({ machines, queue: [stage('g', { machines: 2, gpu: { count: 8, types: ['a100', 'h100'] } })] });
    expect(placed(plan, 'g')?.members?.map((m) => m.machineId)).toEqual(['id-h1', 'id-h2']);
    const mixed = planPlacements({ machines: machines.slice(0, 2), queue: [stage('g', { machines: 2, gpu: { count: 8, types: ['a100', 'h100'] } })] });
    expect(placed(mixed, 'g')).toBeUndefined();
  });

  it("charges the whole gang to its team's quota", () => {
    const plan = planPlacements({
      machines: rack('m', 4),
      queue: [{ ...stage('g', { machines: 3 }), team: 'vision' }],
      teams: [{ name: 'vision', weight: 1, quota: { gpus: { h100: 16 } }, usage: { cpuMillis: 0, memoryBytes: 0, gpus: {} } }],
    });
    expect(plan.placements).toEqual([]);
    expect(reason(plan, 'g')?.reason).toMatch(/quota/);
    expect(plan.reservations).toBeUndefined();
  });
});

describe('a caller that cannot apply gangs', () => {
  it('gets no gang placed nor held, and the reason says so', () => {
    const plan = planAny({ machines: rack('m', 4), queue: [stage('g', { machines: 3 }), stage('one')] });
    expect(plan.pending).toEqual([{ stageId: 'g', reason: GANGS_NOT_APPLIED, unplaceable: true }]);
    expect(plan.reservations).toBeUndefined();
    expect(placed(plan, 'one')).toBeDefined();
  });
});

describe('gangs with sameLabel', () => {
  it('keeps every member in one rack', () => {
    const machines = [...rack('r1', 2, { rack: 'r1' }), ...rack('r2', 3, { rack: 'r2' })];
    const plan = planPlacements({ machines, queue: [stage('g', { machines: 3, sameLabel: 'rack' })] });
    expect(placed(plan, 'g')?.members?.map((m) => m.machineId)).toEqual(['id-r2-1', 'id-r2-2', 'id-r2-3']);
  });

  it('names what it lacks, rack by rack: "needs 4 machines with 8 free h100 GPUs in one rack: 2 racks have 3"', () => {
    const busyOne = (ms: MachineView[]) => ms.map((m, i) => (i === 0 ? { ...m, gpus: gpus('h100', 8, [3]) } : m));
    const machines = [...busyOne(rack('r1', 4, { rack: 'r1' })), ...busyOne(rack('r2', 4, { rack: 'r2' })), ...rack('r3', 2, { rack: 'r3' })];
    const plan = planPlacements({ machines, queue: [stage('g', { machines: 4, sameLabel: 'rack' })] });
    expect(reason(plan, 'g')).toEqual({
      stageId: 'g',
      reason: 'needs 4 machines with 8 free h100 GPUs in one rack: 2 racks have 3, 1 rack has 2',
      unplaceable: false,
    });
    // Held in one rack (the first of the two nearest to fitting), never across racks.
    expect(heldFor(plan, 'g').sort()).toEqual(['id-r1-1', 'id-r1-2', 'id-r1-3', 'id-r1-4']);
  });

  it('counts racks too small even idle, and machines without the label', () => {
    const machines = [...rack('r1', 3, { rack: 'r1' }), ...rack('r2', 3, { rack: 'r2' }), ...rack('loose', 2)];
    const plan = planPlacements({ machines, queue: [stage('g', { machines: 4, sameLabel: 'rack' })] });
    expect(reason(plan, 'g')).toEqual({
      stageId: 'g',
      reason: 'needs 4 machines with 8 h100 GPUs in one rack: even idle, 2 racks have 3; 2 without a rack label',
      unplaceable: true,
    });
  });

  it('words a label key that is not one word as its groups', () => {
    const machines = rack('z', 2, { 'topology.io/zone': 'a' });
    const need = gangNeedOf(stage('g', { machines: 3, sameLabel: 'topology.io/zone' }))!;
    expect(gangPendingReasonNow(need, machines)).toBe('needs 3 machines with 8 h100 GPUs in one topology.io/zone: even idle, 1 topology.io/zone group has 2');
  });
});

describe('two gangs never deadlock (one holder per machine, by priority then age)', () => {
  it('two gangs of 3 on 4 machines: the first in order is placed, the other holds nothing of it', () => {
    const plan = planPlacements({
      machines: rack('m', 4),
      queue: [stage('b', { machines: 3, priority: 50, readySince: 2 }), stage('a', { machines: 3, priority: 50, readySince: 1 })],
    });
    expect(placed(plan, 'a')?.members).toHaveLength(3);
    expect(placed(plan, 'b')).toBeUndefined();
    expect(reason(plan, 'b')).toEqual({ stageId: 'b', reason: 'needs 3 machines with 8 free h100 GPUs: 1 has them', unplaceable: false });
    expect(heldFor(plan, 'b')).toEqual([]);
  });

  it('with every machine partly busy, the higher priority holds its set and the other waits without holding', () => {
    const machines = rack('m', 4).map((m) => ({ ...m, gpus: gpus('h100', 8, [7]) }));
    const plan = planPlacements({
      machines,
      queue: [stage('low', { machines: 3, priority: 10 }), stage('high', { machines: 3, priority: 90, readySince: 5 })],
    });
    expect(plan.placements).toEqual([]);
    expect(heldFor(plan, 'high')).toHaveLength(3);
    expect(heldFor(plan, 'low')).toEqual([]);
  });

  it('a gang holds none of a machine an earlier large stage holds', () => {
    const machines = rack('m', 3).map((m) => ({ ...m, gpus: gpus('h100', 8, [7]) }));
    const plan = planPlacements({ machines, queue: [stage('big', { priority: 90 }), stage('g', { machines: 3, priority: 50 })] });
    expect(heldFor(plan, 'big')).toHaveLength(1);
    expect(heldFor(plan, 'g')).toEqual([]);
  });
});

describe('backfill onto a gang held its machines', () => {
  // Two machines each with one GPU held until 100 s: the gang's expected start is 100 s, the later of its machines'.
  const machines = rack('m', 2).map((m) => ({ ...m, gpus: gpus('h100', 8, [0]) }));
  const heldUntil = machines.map((m, i) => ({ machineId: m.id, gpuIndices: [0], cpuMillis: 0, memoryBytes: 0, endsBy: (i + 1) * 50_000 }));
  const queue = (timeoutSeconds: number) => [stage('g', { machines: 2, priority: 90 }), stage('small', { gpu: { count: 1, types: ['h100'] }, timeoutSeconds })];

  it('takes work that ends before the gang could start', () => {
    const plan = planPlacements({ now: 0, machines, heldUntil, queue: queue(100) });
    expect(heldFor(plan, 'g')).toHaveLength(2);
    expect(placed(plan, 'small')).toBeDefined();
  });

  it('refuses work that would end after it (its start is the last of its machines to free)', () => {
    const plan = planPlacements({ now: 0, machines, heldUntil, queue: queue(60) });
    expect(placed(plan, 'small')).toBeDefined();
    const late = planPlacements({ now: 0, machines, heldUntil, queue: queue(101) });
    expect(placed(late, 'small')).toBeUndefined();
  });

  it('a held machine that fits a member now still waits for the last of the set: backfilled until then; never when one holds without a limit', () => {
    // m-1 is idle (fits a member now); m-2 runs a member of another gang (4 GPUs) that must end by 100 s.
    const set = [machine('m-1', { gpus: gpus('h100', 8) }), machine('m-2', { gpus: gpus('h100', 8, [0, 1, 2, 3]) })];
    const rows = [{ machineId: 'id-m-2', gpuIndices: [0, 1, 2, 3], cpuMillis: 1000, memoryBytes: Gi, endsBy: 100_000 }];
    const plan = planPlacements({ now: 0, machines: set, heldUntil: rows, queue: queue(90) });
    expect(heldFor(plan, 'g')).toEqual(['id-m-1', 'id-m-2']);
    expect(placed(plan, 'small')).toBeDefined();
    expect(placed(planPlacements({ now: 0, machines: set, heldUntil: rows, queue: queue(110) }), 'small')).toBeUndefined();
    // The same member without a time limit: the gang's start is unknown, so nothing backfills its set.
    const endless = [{ ...rows[0]!, endsBy: null }];
    const none = planPlacements({ now: 0, machines: set, heldUntil: endless, queue: queue(1) });
    expect(heldFor(none, 'g')).toEqual(['id-m-1', 'id-m-2']);
    expect(placed(none, 'small')).toBeUndefined();
  });
});

describe('chooseGang', () => {
  it('does not change the machines it is given', () => {
    const machines = rack('m', 2);
    const before = JSON.stringify(machines);
    const out = chooseGang(gangNeedOf(stage('g', { machines: 2 }))!, machines, { barred: () => false, unavailable: () => false });
    expect(out.members?.map((m) => m.machine.name)).toEqual(['m-1', 'm-2']);
    expect(JSON.stringify(machines)).toBe(before);
  });

  it("refuses members with a share of a GPU (the spec does too): a gang's members take whole GPUs", () => {
    const out = chooseGang(gangNeedOf(stage('g', { machines: 2, gpu: { count: 1, milli: 500, types: [] } }))!, rack('m', 2), {
      barred: () => false,
      unavailable: () => false,
    });
    expect(out).toEqual({ members: null, reason: "a gang's members take whole GPUs, not a share of one", unplaceable: true, hold: [] });
  });

  it('asked now: null when the members fit, else the line; a CPU gang is worded by its CPU and memory', () => {
    const gpuGang = gangNeedOf(stage('g', { machines: 2 }))!;
    expect(gangPendingReasonNow(gpuGang, rack('m', 2))).toBeNull();
    const cpuGang = gangNeedOf(stage('c', { machines: 3, gpu: null, cpu: 32_000 }))!;
    const cpus = [machine('c-1'), machine('c-2', { cpuMillisFree: 8000 }), machine('c-3', { cpuMillisFree: 8000 })];
    expect(gangPendingReasonNow(cpuGang, cpus)).toBe('needs 3 machines with 32 CPU, 1Gi free: 1 has them');
    // Waiting for CPU as well as GPUs: the line says so.
    const both = [machine('a', { gpus: gpus('h100', 8, [0]) }), machine('b', { gpus: gpus('h100', 8), cpuMillisFree: 0 })];
    expect(gangPendingReasonNow(gpuGang, both)).toBe('needs 2 machines with 8 free h100 GPUs and 1 CPU, 1Gi free: none has them');
  });

  it('an ordinary stage has no gang', () => {
    expect(gangNeedOf(stage('s'))).toBeNull();
    expect(gangNeedOf(stage('s', { machines: 1 }))).toBeNull();
  });
});
