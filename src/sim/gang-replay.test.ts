import { describe, expect, it } from 'vitest';
import { poolOf, type Resources } from '../domain/resources.js';
import { planPlacements } from '../scheduler/plan-placements.js';
import type { MachineView } from '../scheduler/snapshot.js';
import { hasAlibabaTrace, loadAlibabaTrace, type TracePod } from './alibaba-trace.js';
import { commonGpuModel, sampleMachines, withGangs } from './gang-mix.js';
import { PartialGangError, replayGangs } from './gang-replay.js';
import { withArrivalSpeedup, type Planner } from './trace-replay.js';

const Gi = 1024 ** 3;

function machine(name: string, gpus: number, type = 'g2'): MachineView {
  return {
    id: name,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    cpuMillisTotal: 96000,
    memoryBytesTotal: 384 * Gi,
    cpuMillisFree: 96000,
    memoryBytesFree: 384 * Gi,
    gpus: Array.from({ length: gpus }, (_, index) => ({ index, type, free: true })),
  };
}

function pod(name: string, at: number, hold: number, gpus: number, machines?: number): TracePod {
  const resources: Resources = {
    cpuMillis: machines ? 64000 : 4000,
    memoryBytes: (machines ? 256 : 16) * Gi,
    gpu: gpus > 0 ? { count: gpus, types: machines ? ['g2'] : [] } : null,
    ...(machines ? { machines } : {}),
  };
  return {
    name,
    qos: 'LS',
    phase: 'Succeeded',
    creationTime: at,
    deletionTime: at + hold,
    scheduledTime: at,
    gpuMilli: 1000,
    fractionalGpu: false,
    holdSeconds: hold,
    stage: {
      stageId: name,
      jobId: name,
      stageName: name,
      pool: poolOf(resources),
      priority: 2,
      readySince: at * 1000,
      resources,
      placement: { region: null, labels: {} },
    },
  };
}

/** One-GPU pods of 10 s, one a second from 0 to 199: ten GPUs busy at once, so two 8-GPU machines are never both idle while it lasts. */
const stream = Array.from({ length: 200 }, (_, i) => pod(`s${String(i).padStart(3, '0')}`, i, 10, 1));
/** A gang of 2 × 8 GPUs arriving at 5 behind nothing (`gang` sorts before `s005`, its peer in time). */
const gang = pod('gang', 5, 50, 8, 2);
const pair = [machine('m1', 8), machine('m2', 8)];

describe('replayGangs: a gang behind a stream of small pods (hand-computed)', () => {
  it('with reservations the gang holds both machines as they drain and starts when pods 0–4 have left (t 14); the held idle GPUs are 109 GPU-seconds', () => {
    const r = replayGangs(pair, [...stream, gang], { reservations: true });
    expect(r.gangTimes).toEqual([{ stageId: 'gang', arrival: 5, placedAt: 14 }]);
    expect(r.gangs).toMatchObject({ pods: 1, placed: 1, gpus: 16 });
    expect(r.gangPlacementsChecked).toBe(1);
    // Free GPUs of the held pair from 5 to 14: 11 while pods 0–4 run (5–10), then 12, 13, 14, 15 as they leave one a second.
    expect(r.gangHeldIdleGpuSeconds).toBe(5 * 11 + 12 + 13 + 14 + 15);
    // The cost: pods 5–13 wait for the hold and then the gang (placed at 64, when it ends).
    expect(r.otherGpuPods.placed).toBe(200);
    expect(r.otherGpuPods.waitSeconds!.max).toBe(64 - 5);
  });

  it('without them the gang starves while the stream lasts: it starts only when the last pod (arrived at 199) has left, and nothing was held for it', () => {
    const r = replayGangs(pair, [...stream, gang], { reservations: false });
    expect(r.gangTimes).toEqual([{ stageId: 'gang', arrival: 5, placedAt: 209 }]);
    expect(r.gangHeldIdleGpuSeconds).toBe(0);
    // The small pods never wait: each takes a GPU the gang was waiting for.
    expect(r.otherGpuPods.waitSeconds!.max).toBe(0);
  });
});

describe('replayGangs: no gang is ever partly placed or partly held', () => {
  /** Gangs of 2–4 and single pods of 1–8 GPUs on 6 machines, seeded. */
  function mix(seed: number): TracePod[] {
    let a = seed;
    const r = () => (a = (a * 1103515245 + 12345) % 2147483648) / 2147483648;
    return Array.from({ length: 120 }, (_, i) => {
      const at = Math.floor(i / 3);
      const hold = 5 + Math.floor(r() * 40);
      return r() < 0.15 ? pod(`g${i}`, at, hold, 8, 2 + Math.floor(r() * 3)) : pod(`p${i}`, at, hold, 1 + Math.floor(r() * 8));
    });
  }
  const six = Array.from({ length: 6 }, (_, i) => machine(`m${i}`, 8));

  it('every gang placement is whole under both policies, and every gang is placed in the end', () => {
    for (const reservations of [true, false]) {
      for (const seed of [1, 2, 3]) {
        const pods = mix(seed);
        const r = replayGangs(six, pods, { reservations });
        const gangs = pods.filter((p) => p.stage.resources.machines);
        expect(gangs.length).toBeGreaterThan(5);
        expect(r.gangs.placed).toBe(gangs.length);
        expect(r.gangPlacementsChecked).toBe(gangs.length);
        if (!reservations) expect(r.gangHeldIdleGpuSeconds).toBe(0);
      }
    }
  });

  it('a planner that drops a member, or holds a gang with reservations off, stops the replay', () => {
    const dropsRank1: Planner = (s, o) => {
      const plan = planPlacements(s, o);
      return { ...plan, placements: plan.placements.map((p) => (p.members ? { ...p, members: p.members.slice(0, 1) } : p)) };
    };
    expect(() => replayGangs(pair, [gang], { reservations: true, planner: dropsRank1 })).toThrow(PartialGangError);
    const holdsAnyway: Planner = (s, o) => planPlacements(s, { ...o, gangReservations: true });
    expect(() => replayGangs(pair, [...stream, gang], { reservations: false, planner: holdsAnyway })).toThrow(/holds 2 machines with gang reservations off/);
  });
});

describe('PlanOptions.gangReservations', () => {
  it('false: a gang that does not fit waits with the same reason and holds nothing; the default holds its whole set', () => {
    const busy = pair.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g, free: g.index !== 0 })) }));
    const snapshot = { machines: busy, queue: [gang.stage] };
    const held = planPlacements(snapshot, { gangs: true });
    const off = planPlacements(snapshot, { gangs: true, gangReservations: false });
    expect(held.reservations).toEqual([
      { stageId: 'gang', machineId: 'm1' },
      { stageId: 'gang', machineId: 'm2' },
    ]);
    expect(off.reservations).toBeUndefined();
    expect(off.pending).toEqual(held.pending);
  });
});

describe('withGangs', () => {
  const machines = [...Array.from({ length: 5 }, (_, i) => machine(`a${i}`, 8)), machine('t', 8, 'v100'), machine('s', 2, 't4')];
  const pods = [
    ...Array.from({ length: 400 }, (_, i) => pod(`p${i}`, i, i % 10 === 0 ? 7200 : 60, 1)),
    { ...pod('big', 0, 60, 8), stage: { ...pod('big', 0, 60, 8).stage, resources: { cpuMillis: 64000, memoryBytes: 256 * Gi, gpu: { count: 8, types: [] } } } },
  ];

  it('turns a seeded fraction of GPU pods into gangs of 2–4 × 8 GPUs of the common 8-GPU model, running as long as a long pod', () => {
    expect(commonGpuModel(machines)).toBe('g2');
    const m = withGangs(pods, machines, { fraction: 0.1, seed: 7 });
    expect(m.gpuType).toBe('g2');
    expect(m.gangs.size).toBeGreaterThan(20);
    expect(m.gangs.size).toBeLessThan(70);
    for (const p of m.pods.filter((x) => m.gangs.has(x.stage.stageId))) {
      expect(p.stage.resources).toMatchObject({ cpuMillis: 64000, memoryBytes: 256 * Gi, gpu: { count: 8, types: ['g2'] } });
      expect(p.stage.resources.machines).toBeGreaterThanOrEqual(2);
      expect(p.stage.resources.machines).toBeLessThanOrEqual(4);
      expect(p.holdSeconds).toBe(7200);
    }
    expect(withGangs(pods, machines, { fraction: 0.1, seed: 7 })).toEqual(m);
    expect(withGangs(pods, machines, { fraction: 0.1, seed: 8 }).gangs).not.toEqual(m.gangs);
    expect(withGangs(pods, machines, { fraction: 0 }).gangs.size).toBe(0);
  });

  it('refuses a mix it cannot make, naming what is missing', () => {
    expect(() => withGangs(pods, machines.slice(3), { maxMachines: 4 })).toThrow(/2 machines have 8 g2 GPUs, fewer than a gang of 4/);
    expect(() => withGangs(pods, machines, { fraction: 2 })).toThrow(/fraction must be 0–1/);
    expect(() => withGangs(pods.slice(0, 400), machines)).toThrow(/no pod of 8 GPUs fits a g2 machine/);
  });

  it('sampleMachines keeps one machine in N of each model, the first of each always', () => {
    expect(sampleMachines(machines, 2).map((m) => m.name)).toEqual(['a0', 'a2', 'a4', 's', 't']);
    expect(() => sampleMachines(machines, 0)).toThrow(/every must be an integer/);
  });
});

describe.skipIf(!hasAlibabaTrace())('replayGangs on the Alibaba trace (skipped: ../shared/traces/alibaba-gpu-2023 is absent)', () => {
  it('three busy days on a tenth of the node list at 64×, 5 % gangs: every gang placed whole under both policies, held idle GPUs only with holds', () => {
    const { machines: nodes, pods } = loadAlibabaTrace('default');
    const machines = sampleMachines(nodes, 10);
    const days = pods.filter((p) => p.creationTime >= 142 * 86400 && p.creationTime < 145 * 86400);
    const mix = withGangs(days, machines, { fraction: 0.05, seed: 3 });
    expect(mix.gpuType).toBe('g2');
    const sped = withArrivalSpeedup(mix.pods, 64);
    const on = replayGangs(machines, sped, { reservations: true });
    const off = replayGangs(machines, sped, { reservations: false });
    for (const r of [on, off]) {
      expect(r.gangs.pods).toBe(mix.gangs.size);
      expect(r.gangs.placed).toBe(mix.gangs.size);
      expect(r.gangPlacementsChecked).toBe(mix.gangs.size);
      expect(r.otherGpuPods.placed).toBe(r.otherGpuPods.pods);
    }
    // Contention: gangs waited, and the holds kept GPUs idle; without holds none were.
    expect(on.gangs.waitSeconds!.max).toBeGreaterThan(0);
    expect(on.gangHeldIdleGpuSeconds).toBeGreaterThan(0);
    expect(off.gangHeldIdleGpuSeconds).toBe(0);
  }, 120_000);
});
