import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { MachineHealth } from '../domain/machine-health.js';
import type { MachineScheduling } from '../domain/machine-scheduling.js';
import { GPU_MILLI_WHOLE, normalizeGpuType, poolOf, type Resources } from '../domain/resources.js';
import { planPlacements as referencePlan, type PlanOptions } from '../../test/support/reference-planner/plan-placements.js';
import {
  gangHeadsToRead as referenceGangHeads,
  headsToRead as referenceHeads,
  mayRunSomewhere as referenceMayRun,
} from '../../test/support/reference-planner/placeable-count.js';
import { stageNeed } from './checks.js';
import { gangNeedOf } from './gang-placer.js';
import { gangHeadsToRead } from './placeable-count.js';
import { planPlacements } from './plan-placements.js';
import { shapeDepths } from './shape-depths.js';
import { StaticClasses } from './static-classes.js';
import { SHARE_POLICIES } from './share-policies.js';
import type { GpuView, HeldUntil, MachineView, QueuedStage, RunningAttempt, SchedulerSnapshot, TeamView } from './snapshot.js';

/**
 * The planner made faster for placement at scale (issue 32, docs/throughput.md, "Placement at
 * scale") places exactly what the planner before it did: on random clusters and queues, with GPU
 * types in any case, shares, quotas and teams, holds, gangs, backfill and preemption inputs, the
 * plans are equal, field for field and in order. The reference is a frozen copy of the old code
 * (test/support/reference-planner/).
 */

const Gi = 1024 ** 3;
/** The value type of an arbitrary. */
type Of<A> = A extends fc.Arbitrary<infer T> ? T : never;
const TYPES = ['a100', 'H100', 'h100', ' l4', 'L4'] as const;
const TEAMS = ['a', 'b', 'default'] as const;

const gpuArb = fc.record({
  type: fc.constantFrom(...TYPES),
  used: fc.constantFrom(0, 0, 0, 250, 500, 1000),
  memGi: fc.constantFrom<number | null>(null, 16, 40, 80),
});

const machineArb = fc.record({
  name: fc.constantFrom('m-a', 'm-b', 'm-c', 'm-d', 'm-e', 'm-f'),
  health: fc.constantFrom<MachineHealth>('ready', 'ready', 'ready', 'ready', 'suspect'),
  scheduling: fc.constantFrom<MachineScheduling>('eligible', 'eligible', 'eligible', 'eligible', 'cordoned'),
  region: fc.constantFrom<string | null>(null, null, 'us-east'),
  rack: fc.constantFrom<string | null>(null, 'r1', 'r2'),
  cores: fc.constantFrom(4, 16, 64, 128),
  cpuUsedQuarters: fc.constantFrom(0, 0, 1, 2, 4),
  memGi: fc.constantFrom(16, 256, 1024),
  gpuKind: fc.constantFrom('none', 'none', 'one-type', 'one-type', 'one-type', 'mixed'),
  gpuCount: fc.constantFrom(1, 2, 4, 8),
  gpus: fc.array(gpuArb, { minLength: 1, maxLength: 8 }),
});

function buildMachine(p: Of<typeof machineArb>, i: number): MachineView {
  const cpu = p.cores * 1000;
  const mem = p.memGi * Gi;
  let gpus: GpuView[] = [];
  if (p.gpuKind === 'one-type') {
    const t = p.gpus[0]!;
    gpus = Array.from({ length: p.gpuCount }, (_, index) => gpuView(index, t.type, index === 0 ? t.used : 0, t.memGi));
  } else if (p.gpuKind === 'mixed') {
    gpus = p.gpus.map((g, index) => gpuView(index, g.type, g.used, g.memGi));
  }
  return {
    id: `id-${i}`,
    name: p.name,
    health: p.health,
    scheduling: p.scheduling,
    region: p.region,
    labels: p.rack === null ? {} : { rack: p.rack },
    cpuMillisTotal: cpu,
    memoryBytesTotal: mem,
    cpuMillisFree: cpu - (cpu * p.cpuUsedQuarters) / 4,
    memoryBytesFree: mem - (mem * p.cpuUsedQuarters) / 4,
    gpus,
  };
}

function gpuView(index: number, type: string, used: number, memGi: number | null): GpuView {
  const freeMilli = GPU_MILLI_WHOLE - used;
  return {
    index,
    type,
    free: freeMilli === GPU_MILLI_WHOLE,
    ...(used > 0 && used < GPU_MILLI_WHOLE ? { freeMilli } : {}),
    ...(memGi !== null ? { memoryBytesTotal: memGi * Gi } : {}),
    ...(memGi !== null && used > 0 && used < GPU_MILLI_WHOLE ? { memoryBytesFree: (memGi * Gi * freeMilli) / GPU_MILLI_WHOLE } : {}),
  };
}

const stageArb = fc.record({
  priority: fc.integer({ min: 0, max: 3 }),
  readySince: fc.integer({ min: 0, max: 5 }),
  submitted: fc.option(fc.integer({ min: 0, max: 3 }), { nil: undefined }),
  job: fc.integer({ min: 0, max: 6 }),
  cpu: fc.constantFrom(250, 1000, 2000, 8000, 32000),
  memGi: fc.constantFrom(1, 4, 16, 64),
  gpu: fc.oneof(
    { weight: 3, arbitrary: fc.constant(null) },
    {
      weight: 5,
      arbitrary: fc.record({
        count: fc.constantFrom(1, 1, 1, 2, 4, 8),
        types: fc.subarray([...TYPES], { maxLength: 2 }),
        milli: fc.constantFrom<number | undefined>(undefined, undefined, 250, 500),
        memGi: fc.constantFrom<number | undefined>(undefined, undefined, undefined, 10, 40),
      }),
    },
  ),
  gang: fc.constantFrom(1, 1, 1, 1, 2, 3),
  sameLabel: fc.boolean(),
  region: fc.constantFrom<string | null>(null, null, null, null, null, 'us-east', 'eu-west'),
  rackLabel: fc.constantFrom<string | null>(null, null, null, null, null, 'r1'),
  allowGpuMachines: fc.boolean(),
  team: fc.constantFrom<string | undefined>(undefined, ...TEAMS),
  preemptible: fc.boolean(),
  timeout: fc.constantFrom<number | null>(null, null, 10, 600),
});

function buildStage(p: Of<typeof stageArb>, i: number): QueuedStage {
  const gpu: Resources['gpu'] =
    p.gpu === null
      ? null
      : {
          count: p.gpu.milli !== undefined ? 1 : p.gpu.count,
          types: p.gpu.types,
          ...(p.gpu.milli !== undefined ? { milli: p.gpu.milli } : {}),
          ...(p.gpu.memGi !== undefined ? { memoryBytes: p.gpu.memGi * Gi } : {}),
        };
  const gang = p.gang > 1 && (gpu === null || gpu.milli === undefined) ? p.gang : 1;
  const resources: Resources = { cpuMillis: p.cpu, memoryBytes: p.memGi * Gi, gpu, ...(gang > 1 ? { machines: gang } : {}) };
  return {
    stageId: `s${String(i).padStart(2, '0')}`,
    jobId: `job-${p.job}`,
    stageName: `st${i}`,
    pool: poolOf(resources),
    priority: p.priority * 10,
    readySince: p.readySince,
    ...(p.submitted !== undefined ? { submittedAt: p.submitted } : {}),
    resources,
    placement: {
      region: p.region,
      labels: p.rackLabel === null ? {} : { rack: p.rackLabel },
      ...(p.allowGpuMachines && gpu === null ? { allowGpuMachines: true } : {}),
      ...(gang > 1 && p.sameLabel ? { sameLabel: 'rack' } : {}),
    },
    ...(p.team !== undefined ? { team: p.team } : {}),
    ...(p.preemptible ? { preemptible: true } : {}),
    ...(p.timeout !== null ? { timeoutSeconds: p.timeout } : {}),
  };
}

const runningArb = fc.record({
  machine: fc.nat(),
  gpus: fc.constantFrom(0, 1, 1, 2, 4),
  milli: fc.constantFrom(GPU_MILLI_WHOLE, GPU_MILLI_WHOLE, 500),
  cpu: fc.constantFrom(500, 2000),
  team: fc.constantFrom(...TEAMS),
  priority: fc.integer({ min: 0, max: 2 }),
  preemptible: fc.constantFrom(true, true, false),
  leaving: fc.constantFrom(false, false, false, true),
  startedAt: fc.integer({ min: 0, max: 90_000 }),
  preemptedAt: fc.constantFrom<number | null>(null, null, 95_000),
  endsIn: fc.constantFrom<number | null>(null, 5_000, 60_000, 1_000_000),
});

/** Attempts that hold room: taken from the machines they run on (only where it fits), so the snapshot stays consistent. */
function buildRunning(ps: readonly Of<typeof runningArb>[], machines: MachineView[], now: number): { running: RunningAttempt[]; heldUntil: HeldUntil[] } {
  const running: RunningAttempt[] = [];
  const heldUntil: HeldUntil[] = [];
  ps.forEach((p, i) => {
    if (machines.length === 0) return;
    const m = machines[p.machine % machines.length]!;
    const mem = Gi;
    if (m.cpuMillisFree < p.cpu || m.memoryBytesFree < mem) return;
    const milli = p.gpus === 1 ? p.milli : GPU_MILLI_WHOLE;
    const freeOf = (g: GpuView) => g.freeMilli ?? (g.free ? GPU_MILLI_WHOLE : 0);
    const first = m.gpus.find((g) => freeOf(g) >= milli);
    const gpus = p.gpus === 0 || first === undefined ? [] : m.gpus.filter((g) => g.type === first.type && freeOf(g) === GPU_MILLI_WHOLE).slice(0, p.gpus);
    if (p.gpus > 0 && (milli < GPU_MILLI_WHOLE ? first === undefined : gpus.length < p.gpus)) return;
    const taken = milli < GPU_MILLI_WHOLE ? [first!] : gpus;
    for (const g of taken) {
      g.freeMilli = freeOf(g) - milli;
      g.free = false;
    }
    m.cpuMillisFree -= p.cpu;
    m.memoryBytesFree -= mem;
    const gpuIndices = taken.map((g) => g.index);
    running.push({
      attemptId: `a${i}`,
      token: 1,
      stageId: `run${i}`,
      jobId: `rjob${i}`,
      stageName: `run${i}`,
      machineId: m.id,
      team: p.team,
      priority: p.priority * 10,
      preemptible: p.preemptible,
      cpuMillis: p.cpu,
      memoryBytes: mem,
      gpuIndices,
      gpuType: taken[0] ? normalizeGpuType(taken[0].type) : null,
      ...(milli < GPU_MILLI_WHOLE ? { gpuMilli: milli } : {}),
      startedAt: p.startedAt,
      stagePreemptedAt: p.preemptedAt,
      leaving: p.leaving,
    });
    heldUntil.push({
      machineId: m.id,
      gpuIndices,
      ...(milli < GPU_MILLI_WHOLE ? { gpuMilli: milli } : {}),
      cpuMillis: p.cpu,
      memoryBytes: mem,
      endsBy: p.endsIn === null ? null : now + p.endsIn,
    });
  });
  return { running, heldUntil };
}

const teamArb = fc.record({
  weight: fc.integer({ min: 1, max: 3 }),
  cpuQuota: fc.constantFrom<number | undefined>(undefined, 4000, 40_000),
  gpuQuota: fc.constantFrom<number | undefined>(undefined, 1, 2.5, 8),
  usedCpu: fc.constantFrom(0, 2000),
  usedH100: fc.constantFrom(0, 0.5, 2),
});

function buildTeams(ps: readonly Of<typeof teamArb>[]): TeamView[] {
  return ps.map((p, i) => {
    const gpus: Record<string, number> = {};
    if (p.usedH100 > 0) gpus.h100 = p.usedH100;
    return {
      name: TEAMS[i]!,
      weight: p.weight,
      quota: {
        ...(p.cpuQuota !== undefined ? { cpuMillis: p.cpuQuota } : {}),
        ...(p.gpuQuota !== undefined ? { gpus: { h100: p.gpuQuota } } : {}),
      },
      usage: { cpuMillis: p.usedCpu, memoryBytes: 0, gpus },
    };
  });
}

const caseFields = {
  machines: fc.array(machineArb, { minLength: 2, maxLength: 14 }),
  queue: fc.array(stageArb, { maxLength: 24 }),
  running: fc.array(runningArb, { maxLength: 16 }),
  withRunning: fc.boolean(),
  withHeldUntil: fc.boolean(),
  teams: fc.option(fc.array(teamArb, { minLength: 1, maxLength: 3 }), { nil: undefined }),
  gangs: fc.constantFrom(true, true, true, false),
  gangReservations: fc.constantFrom<boolean | undefined>(undefined, undefined, false),
  maxPlacements: fc.constantFrom<number | undefined>(undefined, undefined, 1, 3, 8),
  candidateLimit: fc.constantFrom<number | undefined>(undefined, undefined, 1, 2),
  // Clustering reads request classes the server's snapshot has not: left out, as the server leaves it out.
  gpuPolicy: fc.constantFrom(...SHARE_POLICIES.filter((p) => p !== 'clustering'), 'fgd', 'fgd'),
};
const caseArb = fc.record(caseFields);
/** A busy cluster: many attempts hold room, so that stages wait, hold machines and preempt. */
const busyCaseArb = fc.record({
  ...caseFields,
  running: fc.array(runningArb, { minLength: 10, maxLength: 40 }),
  withRunning: fc.constant(true),
});

const NOW = 100_000;

/**
 * The queue, where stages of one priority and time mix some with a submission time and some
 * without, with those without given their readiness as one (their time is unchanged): there the
 * reference's order was circular, and its plan an accident of its sort's comparisons. Today's
 * order is total and says a submitted stage comes first (docs/scheduling.md, "Order";
 * merged-runs.test.ts proves it). Elsewhere stages without a submission time stay as drawn.
 */
function withoutMixedTies(queue: QueuedStage[]): QueuedStage[] {
  const tie = (s: QueuedStage) => `${s.priority}|${s.submittedAt ?? s.readySince}`;
  const submitted = new Set(queue.filter((s) => s.submittedAt !== undefined).map(tie));
  return queue.map((s) => (s.submittedAt === undefined && submitted.has(tie(s)) ? { ...s, submittedAt: s.readySince } : s));
}

function buildCase(c: Of<typeof caseArb>): { snapshot: SchedulerSnapshot; opts: PlanOptions } {
  const machines = c.machines.map(buildMachine);
  const { running, heldUntil } = buildRunning(c.running, machines, NOW);
  const snapshot: SchedulerSnapshot = {
    machines,
    queue: withoutMixedTies(c.queue.map(buildStage)),
    now: NOW,
    ...(c.teams !== undefined ? { teams: buildTeams(c.teams) } : {}),
    ...(c.withRunning && running.length ? { running } : {}),
    ...(c.withHeldUntil ? { heldUntil } : {}),
  };
  const opts: PlanOptions = {
    gangs: c.gangs,
    gpuPolicy: c.gpuPolicy,
    ...(c.gangReservations !== undefined ? { gangReservations: c.gangReservations } : {}),
    ...(c.maxPlacements !== undefined ? { maxPlacements: c.maxPlacements } : {}),
    ...(c.candidateLimit !== undefined ? { candidateLimit: c.candidateLimit } : {}),
  };
  return { snapshot, opts };
}

/** The plan, or the error's message: where the old planner throws, the new one must throw the same. */
function outcome(plan: typeof planPlacements, snapshot: SchedulerSnapshot, opts: PlanOptions) {
  try {
    return { plan: plan(structuredClone(snapshot), opts) };
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}

/** The planner as the server's pass runs it: the machines grouped once, for the shapes' depths and then the planner (`staticClasses`). */
const serverPlan: typeof planPlacements = (given, opts) => {
  // As the store reads them: the stages of a shape share its request's objects (here each of
  // resources and placement is shared by every stage where it is equal, so that stages of equal
  // resources and different placements share one and not the other).
  const shared = new Map<string, object>();
  const share = <T extends object>(x: T): T => {
    const key = JSON.stringify(x);
    const known = shared.get(key) as T | undefined;
    if (known !== undefined) return known;
    shared.set(key, x);
    return x;
  };
  const queue = given.queue.map((q) => ({ ...q, resources: share(q.resources), placement: share(q.placement) }));
  const snapshot = { ...given, queue };
  const classes = new StaticClasses(snapshot.machines);
  shapeDepths(snapshot.queue.map(stageNeed), snapshot.machines, 1000, false, classes);
  return planPlacements(snapshot, { ...opts, staticClasses: classes });
};

describe('the planner places exactly what the reference (the planner before issue 32) did', () => {
  it('on random clusters and queues: placements, pending reasons, reservations and preemptions', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const { snapshot, opts } = buildCase(c);
        const want = outcome(referencePlan, snapshot, opts);
        expect(outcome(planPlacements, snapshot, opts)).toEqual(want);
        expect(outcome(serverPlan, snapshot, opts)).toEqual(want);
      }),
      { numRuns: 400 },
    );
  });

  it('on busy clusters, where stages wait, hold machines and preempt', () => {
    fc.assert(
      fc.property(busyCaseArb, (c) => {
        const { snapshot, opts } = buildCase(c);
        const want = outcome(referencePlan, snapshot, opts);
        expect(outcome(planPlacements, snapshot, opts)).toEqual(want);
        expect(outcome(serverPlan, snapshot, opts)).toEqual(want);
      }),
      { numRuns: 300 },
    );
  });

  it('reads each shape as deep as the server did before (shapeDepths against headsToRead per shape)', () => {
    fc.assert(
      fc.property(
        fc.array(machineArb, { maxLength: 14 }),
        fc.array(stageArb, { minLength: 1, maxLength: 8 }),
        fc.constantFrom(1, 5, 1000),
        fc.boolean(),
        (ms, ss, cap, mayPreempt) => {
          const machines = ms.map(buildMachine);
          const needs = ss.map((s, i) => stageNeed(buildStage(s, i)));
          // The server's pass before: headsToRead over every machine, and one head where it may preempt.
          const before = needs.map((need) => {
            const room = referenceHeads(need, machines, cap);
            return room === 0 && mayPreempt && referenceMayRun(need, machines) ? 1 : room;
          });
          expect(shapeDepths(needs, machines, cap, mayPreempt)).toEqual(before);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("reads a gang's shape as deep as before (gangHeadsToRead, whose room per machine counts GPUs anew)", () => {
    fc.assert(
      fc.property(fc.array(machineArb, { maxLength: 14 }), stageArb, fc.constantFrom(1, 5, 1000), (ms, s, cap) => {
        const machines = ms.map(buildMachine);
        const gang = gangNeedOf(buildStage({ ...s, gang: s.gang === 3 ? 3 : 2, gpu: s.gpu && { ...s.gpu, milli: undefined } }, 0));
        if (gang === null) return;
        expect(gangHeadsToRead(gang, machines, cap)).toBe(referenceGangHeads(gang, machines, cap));
      }),
      { numRuns: 300 },
    );
  });

  it('does not leave the snapshot changed', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const { snapshot, opts } = buildCase(c);
        const before = structuredClone(snapshot);
        try {
          planPlacements(snapshot, opts);
        } catch {
          // Only the snapshot is looked at here; the outcome is compared above.
        }
        expect(snapshot).toEqual(before);
      }),
      { numRuns: 100 },
    );
  });
});
