import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { poolOf, type Resources } from '../domain/resources.js';
import { addUsage, emptyTeamUsage, type TeamQuota } from '../domain/team.js';
import { gpuFreeMilli } from '../domain/resources.js';
import { stageNeed } from './checks.js';
import { explainPlacement } from './explain-placement.js';
import { neverPlaceable } from './never-placeable.js';
import { pendingReasonNow } from './pending-reason.js';
import { placeableCount } from './placeable-count.js';
import { allocationProblem, releaseAllocation, takeAllocation } from './placement-fit.js';
import { planPlacements } from './plan-placements.js';
import { SERVER_SHARE_POLICIES } from './share-policies.js';
import type { GpuView, MachineView, Plan, QueuedStage, RunningAttempt, SchedulerSnapshot, TeamView } from './snapshot.js';
import { snapshotWorkload } from './snapshot-workload.js';

/** Shares of a GPU in the server's planner (issue 29; docs/scheduling.md, "Placement of shares"). */

const Gi = 1024 ** 3;

/** GPUs by their free thousandths (1000 idle), optionally with memory total / free in GiB. */
function gpus(type: string, free: readonly number[], memGi?: (number | null)[], memFreeGi?: number[]): GpuView[] {
  return free.map((f, index) => ({
    index,
    type,
    free: f === 1000,
    freeMilli: f,
    ...(memGi ? { memoryBytesTotal: memGi[index] === null ? null : memGi[index]! * Gi } : {}),
    ...(memFreeGi ? { memoryBytesFree: memFreeGi[index]! * Gi } : {}),
  }));
}

function machine(name: string, gpuList: GpuView[], p: Partial<MachineView> = {}): MachineView {
  return {
    id: `id-${name}`,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    cpuMillisTotal: 32_000,
    memoryBytesTotal: 256 * Gi,
    cpuMillisFree: 32_000,
    memoryBytesFree: 256 * Gi,
    gpus: gpuList,
    ...p,
  };
}

function stage(id: string, gpu: Resources['gpu'], p: Partial<QueuedStage> & { cpu?: number } = {}): QueuedStage {
  const resources: Resources = { cpuMillis: p.cpu ?? 1000, memoryBytes: Gi, gpu };
  return {
    stageId: id,
    jobId: `job-${id}`,
    stageName: id,
    pool: poolOf(resources),
    priority: 0,
    readySince: 0,
    resources,
    placement: { region: null, labels: {} },
    ...p,
  };
}

const share = (milli: number, type = 't4', memoryBytes?: number): Resources['gpu'] => ({
  count: 1,
  types: [type],
  milli,
  ...(memoryBytes !== undefined ? { memoryBytes } : {}),
});
const whole = (count: number, type = 't4', memoryBytes?: number): Resources['gpu'] => ({
  count,
  types: [type],
  ...(memoryBytes !== undefined ? { memoryBytes } : {}),
});

const placed = (plan: Plan, id: string) => plan.placements.find((p) => p.stageId === id);
const reason = (plan: Plan, id: string) => plan.pending.find((p) => p.stageId === id);

describe('placement of shares', () => {
  it('two 0.5 stages on a one-GPU machine both go on GPU 0, each holding 500 thousandths', () => {
    const plan = planPlacements({ machines: [machine('m', gpus('t4', [1000]))], queue: [stage('a', share(500)), stage('b', share(500))] });
    expect(plan.placements).toEqual([
      { stageId: 'a', machineId: 'id-m', gpuIndices: [0], gpuMilli: 500, cpuMillis: 1000, memoryBytes: Gi },
      { stageId: 'b', machineId: 'id-m', gpuIndices: [0], gpuMilli: 500, cpuMillis: 1000, memoryBytes: Gi },
    ]);
    expect(plan.pending).toEqual([]);
  });

  it('a whole-GPU stage waits behind a GPU that holds a share, and says so; an idle GPU beside it takes it', () => {
    const shared = machine('m', gpus('t4', [750]));
    const plan = planPlacements({ machines: [shared], queue: [stage('w', whole(1))] });
    expect(plan.placements).toEqual([]);
    expect(reason(plan, 'w')).toEqual({ stageId: 'w', reason: 'no machine with 1 free t4 GPU: 1 of 1 matching machine busy', unplaceable: false });
    // Placed in the same pass after a share: the share broke GPU 0, the whole stage takes GPU 1.
    const two = planPlacements({ machines: [machine('m', gpus('t4', [1000, 1000]))], queue: [stage('s', share(250), { priority: 9 }), stage('w', whole(1))] });
    expect(placed(two, 's')?.gpuIndices).toEqual([0]);
    expect(placed(two, 'w')?.gpuIndices).toEqual([1]);
    const three = planPlacements({ machines: [machine('m', gpus('t4', [1000]))], queue: [stage('s', share(250), { priority: 9 }), stage('w', whole(1))] });
    expect(placed(three, 'w')).toBeUndefined();
  });

  it.each(SERVER_SHARE_POLICIES)('%s packs a share onto a GPU already shared before breaking an idle one', (gpuPolicy) => {
    const machines = [machine('a', gpus('t4', [1000, 1000])), machine('b', gpus('t4', [1000, 500])), machine('c', gpus('t4', [1000, 1000]))];
    // Whole GPUs are wanted too (the target workload has a 1-GPU shape), so breaking one fragments for FGD.
    const plan = planPlacements({ machines, queue: [stage('s', share(500), { priority: 9 }), stage('w', whole(1))] }, { gpuPolicy });
    expect(placed(plan, 's')).toMatchObject({ machineId: 'id-b', gpuIndices: [1], gpuMilli: 500 });
  });

  it('FGD with only half shares in view sees no fragmentation either way: the tie goes to the lowest index', () => {
    // Its measure: every free thousandth stays usable by the next 0.5 share wherever this one goes.
    const plan = planPlacements({ machines: [machine('b', gpus('t4', [1000, 500]))], queue: [stage('s', share(500))] });
    expect(placed(plan, 's')?.gpuIndices).toEqual([0]);
  });

  it('a share of a type nobody has, or more GPU memory than any GPU has, is never placeable, and says which', () => {
    const machines = [machine('m', gpus('t4', [1000, 1000], [16, 16]))];
    expect(neverPlaceable(stageNeed(stage('x', share(250, 'h100'))), machines)).toBe('no registered machine could ever run it: 1 lacks 1 h100 GPU');
    expect(neverPlaceable(stageNeed(stage('x', share(250, 't4', 40 * Gi))), machines)).toMatch(
      /^no registered machine could ever run it: 1 lacks 1 t4 GPU known to have 40Gi of memory/,
    );
    expect(neverPlaceable(stageNeed(stage('x', share(250, 't4', 8 * Gi))), machines)).toBeNull();
  });
});

describe('GPU memory bounds', () => {
  it("shares' memory on a GPU never exceeds its total: a second 10 GiB share goes to the other GPU, a third waits", () => {
    const m = machine('m', gpus('t4', [1000, 1000], [16, 16]));
    const plan = planPlacements({ machines: [m], queue: ['a', 'b', 'c'].map((id) => stage(id, share(250, 't4', 10 * Gi))) }, { gpuPolicy: 'best-fit' });
    expect(plan.placements.map((p) => [p.stageId, p.gpuIndices, p.gpuMemoryBytes])).toEqual([
      ['a', [0], 10 * Gi],
      ['b', [1], 10 * Gi],
    ]);
    expect(reason(plan, 'c')).toEqual({
      stageId: 'c',
      reason: 'no t4 GPU with 0.25 and 10Gi of its memory free: 1 of 1 matching machine busy',
      unplaceable: false,
    });
  });

  it('reads what the store says is free of a GPU’s memory', () => {
    const m = machine('m', gpus('t4', [500, 1000], [16, 16], [4, 16]));
    const plan = planPlacements({ machines: [m], queue: [stage('a', share(250, 't4', 6 * Gi))] });
    expect(placed(plan, 'a')?.gpuIndices).toEqual([1]);
  });

  it('a whole GPU must have the memory in all; a GPU whose memory is unknown takes no stage that bounds it, and the reason says so', () => {
    const machines = [machine('small', gpus('t4', [1000], [16])), machine('big', gpus('t4', [1000], [80])), machine('unknown', gpus('t4', [1000], [null]))];
    expect(placed(planPlacements({ machines, queue: [stage('w', whole(1, 't4', 40 * Gi))] }), 'w')?.machineId).toBe('id-big');
    const only = [machines[0]!, machines[2]!];
    const plan = planPlacements({ machines: only, queue: [stage('w', whole(1, 't4', 40 * Gi))] });
    expect(reason(plan, 'w')).toEqual({
      stageId: 'w',
      reason: 'no ready machine can run it: 2 lack 1 t4 GPU known to have 40Gi of memory (a GPU whose memory is unknown takes no stage that bounds GPU memory)',
      unplaceable: true,
    });
    // Without a bound, the unknown one is as good as any.
    expect(placed(planPlacements({ machines: only, queue: [stage('w', whole(1))] }), 'w')).toBeDefined();
  });
});

describe('reasons, explain and counts for shares', () => {
  const busy = [machine('a', gpus('h100', [100, 0])), machine('b', gpus('h100', [200]))];
  const need = stageNeed(stage('s', share(250, 'h100')));

  it('the pending reason names the share it waits for on one GPU', () => {
    expect(pendingReasonNow(need, busy)).toBe('no h100 GPU with 0.25 free: 2 of 2 matching machines busy');
    expect(pendingReasonNow(need, [...busy, machine('c', gpus('h100', [250]))])).toBeNull();
  });

  it('explain shows the share in its funnel step', () => {
    const ex = explainPlacement(need, busy);
    expect(ex.funnel.find((f) => f.reason === 'gpu-busy')).toEqual({ step: 'with a h100 GPU with 0.25 free now', reason: 'gpu-busy', machines: 0 });
  });

  it('placeableCount counts as many shares as each GPU’s free thousandths hold', () => {
    const m = [machine('a', gpus('t4', [1000, 600, 0]))];
    expect(placeableCount(stageNeed(stage('s', share(250))), m, 100)).toBe(4 + 2);
    expect(placeableCount(stageNeed(stage('s', whole(1))), m, 100)).toBe(1);
  });
});

describe('placement-fit with shares', () => {
  it('a share takes and gives back only its thousandths and memory; a whole GPU never goes on a shared one', () => {
    const m = machine('m', gpus('t4', [1000], [16]));
    const a = { cpuMillis: 0, memoryBytes: 0, gpuIndices: [0], gpuMilli: 300, gpuMemoryBytes: 4 * Gi };
    takeAllocation(m, a);
    takeAllocation(m, a);
    expect(m.gpus[0]).toMatchObject({ freeMilli: 400, free: false, memoryBytesFree: 8 * Gi });
    expect(allocationProblem(m, { cpuMillis: 0, memoryBytes: 0, gpuIndices: [0] })).toBe('GPU 0 holds shares (400 of 1000 free)');
    expect(allocationProblem(m, { ...a, gpuMilli: 500 })).toBe('GPU 0 has 400 thousandths free, needs 500');
    expect(allocationProblem(m, { ...a, gpuMemoryBytes: 9 * Gi })).toBe(`GPU 0 has ${8 * Gi} memory bytes free, needs ${9 * Gi}`);
    releaseAllocation(m, a);
    expect(m.gpus[0]).toMatchObject({ freeMilli: 700, free: false, memoryBytesFree: 12 * Gi });
    releaseAllocation(m, a);
    expect(m.gpus[0]).toMatchObject({ freeMilli: 1000, free: true, memoryBytesFree: 16 * Gi });
    expect(() => releaseAllocation(m, a)).toThrow(/holds 0/);
  });

  it('backfill: a held machine frees only the thousandths of what ends, so a whole stage starts when every share there has ended', () => {
    // GPU 0 holds two half shares, ending at 100 s and 200 s; GPU 1 is idle. A 2-GPU stage waits for
    // GPU 0 until 200 s (not 100 s, when only half of it is free): a 150 s stage backfills GPU 1.
    const m = machine('m', gpus('t4', [0, 1000]), { cpuMillisTotal: 4000, cpuMillisFree: 3000 });
    const snapshot: SchedulerSnapshot = {
      now: 0,
      machines: [m],
      queue: [
        stage('big', whole(2), { priority: 9 }),
        stage('short', whole(1), { timeoutSeconds: 150 }),
        stage('long', whole(1), { timeoutSeconds: 300, readySince: 1 }),
      ],
      heldUntil: [
        { machineId: 'id-m', gpuIndices: [0], gpuMilli: 500, cpuMillis: 500, memoryBytes: 0, endsBy: 100_000 },
        { machineId: 'id-m', gpuIndices: [0], gpuMilli: 500, cpuMillis: 500, memoryBytes: 0, endsBy: 200_000 },
      ],
    };
    const plan = planPlacements(snapshot);
    expect(plan.reservations).toEqual([{ stageId: 'big', machineId: 'id-m' }]);
    expect(placed(plan, 'short')).toMatchObject({ machineId: 'id-m', gpuIndices: [1] });
    expect(placed(plan, 'long')).toBeUndefined();
  });
});

describe('quotas and fair share count shares', () => {
  it('sums shares exactly in thousandths (0.1 + 0.2 is 0.3; four quarters are 1)', () => {
    const u = emptyTeamUsage();
    addUsage(u, { cpuMillis: 0, memoryBytes: 0, gpuCount: 1, gpuMilli: 100, gpuType: 't4' });
    addUsage(u, { cpuMillis: 0, memoryBytes: 0, gpuCount: 1, gpuMilli: 200, gpuType: 't4' });
    expect(u.gpus.t4).toBe(0.3);
    for (let i = 0; i < 4; i++) addUsage(u, { cpuMillis: 0, memoryBytes: 0, gpuCount: 1, gpuMilli: 250, gpuType: 'h100' });
    expect(u.gpus.h100).toBe(1);
    addUsage(u, { cpuMillis: 0, memoryBytes: 0, gpuCount: 1, gpuMilli: 100, gpuType: 't4' }, -1);
    expect(u.gpus.t4).toBe(0.2);
  });

  it('a 0.25 share counts 0.25 against a fractional quota: with 0.5 of 0.75 used, one more is placed, the next waits naming the amounts', () => {
    const quota: TeamQuota = { gpus: { t4: 0.75 } };
    const teams: TeamView[] = [{ name: 'vision', weight: 1, quota, usage: { ...emptyTeamUsage(), gpus: { t4: 0.5 } } }];
    const plan = planPlacements({
      machines: [machine('m', gpus('t4', [1000, 1000]))],
      teams,
      queue: [stage('a', share(250), { team: 'vision' }), stage('b', share(250), { team: 'vision', readySince: 1 })],
    });
    expect(placed(plan, 'a')).toBeDefined();
    expect(reason(plan, 'b')).toEqual({ stageId: 'b', reason: 'team vision at quota: uses 0.75 of 0.75 t4 GPUs, the stage needs 0.25', unplaceable: false });
    const never = planPlacements({
      machines: [machine('m', gpus('t4', [1000]))],
      teams: [{ ...teams[0]!, quota: { gpus: { t4: 0.2 } } }],
      queue: [stage('a', share(250), { team: 'vision' })],
    });
    expect(reason(never, 'a')?.reason).toBe(
      "team vision's quota is 0.2 t4 GPUs, the stage needs 0.25: it can never run within the quota (raise the quota, or make the stage preemptible so it may borrow)",
    );
  });

  it('fair share: a team holding quarter shares has a quarter of the GPU share of one holding whole GPUs', () => {
    // Two teams, each with one stage: the one whose usage is 4 × 0.25 = 1 GPU and the one with 2 GPUs.
    const teams: TeamView[] = [
      { name: 'quarters', weight: 1, quota: {}, usage: { ...emptyTeamUsage(), gpus: { t4: 1 } } },
      { name: 'wholes', weight: 1, quota: {}, usage: { ...emptyTeamUsage(), gpus: { t4: 2 } } },
    ];
    const plan = planPlacements({
      machines: [machine('m', gpus('t4', [1000, 0, 0, 0]))],
      teams,
      queue: [stage('w', whole(1), { team: 'wholes' }), stage('q', whole(1), { team: 'quarters', readySince: 5 })],
    });
    expect(plan.placements.map((p) => p.stageId)).toEqual(['q']);
  });
});

function attempt(id: string, machineId: string, gpuIndices: number[], p: Partial<RunningAttempt> = {}): RunningAttempt {
  return {
    attemptId: `att-${id}`,
    token: 1,
    stageId: `stg-${id}`,
    jobId: `job-${id}`,
    stageName: id,
    machineId,
    team: 'default',
    priority: 10,
    preemptible: true,
    cpuMillis: 1000,
    memoryBytes: Gi,
    gpuIndices,
    gpuType: 't4',
    startedAt: 0,
    stagePreemptedAt: null,
    leaving: false,
    ...p,
  };
}

describe('preemption with shares', () => {
  // One GPU, three shares on it: 0.5 (started at 0: most work lost), 0.25 and 0.25 (started late: cheap).
  const full = machine('m', gpus('t4', [0]), { cpuMillisFree: 32_000 - 3000, memoryBytesFree: 256 * Gi - 3 * Gi });
  const running = [
    attempt('half', 'id-m', [0], { gpuMilli: 500, startedAt: 0 }),
    attempt('q1', 'id-m', [0], { gpuMilli: 250, startedAt: 50_000 }),
    attempt('q2', 'id-m', [0], { gpuMilli: 250, startedAt: 60_000 }),
  ];
  const base = { machines: [full], running, now: 100_000 };

  it('a waiting share stops only enough share holders to free its thousandths on the GPU, the least work lost first', () => {
    const plan = planPlacements({ ...base, queue: [stage('s', share(250), { priority: 900 })] });
    expect(plan.preemptions?.map((p) => p.victims.map((v) => v.attemptId))).toEqual([['att-q2']]);
    const half = planPlacements({ ...base, queue: [stage('s', share(500), { priority: 900 })] });
    expect(half.preemptions?.map((p) => p.victims.map((v) => v.attemptId).sort())).toEqual([['att-q1', 'att-q2']]);
  });

  it('a whole-GPU stage must free every share on the GPU', () => {
    const plan = planPlacements({ ...base, queue: [stage('w', whole(1), { priority: 900 })] });
    expect(plan.preemptions?.map((p) => p.victims.map((v) => v.attemptId).sort())).toEqual([['att-half', 'att-q1', 'att-q2']]);
  });

  it('a share may stop a whole-GPU holder, and a share that would still not fit stops nothing', () => {
    const one = machine('m', gpus('t4', [0]));
    const plan = planPlacements({ machines: [one], running: [attempt('w', 'id-m', [0])], now: 1, queue: [stage('s', share(100), { priority: 900 })] });
    expect(plan.preemptions?.[0]?.victims.map((v) => v.attemptId)).toEqual(['att-w']);
    const notPreemptible = running.map((a) => (a.attemptId === 'att-half' ? { ...a, preemptible: false } : a));
    const none = planPlacements({ ...base, running: notPreemptible, queue: [stage('s', share(600), { priority: 900 })] });
    expect(none.preemptions).toBeUndefined();
  });
});

describe('target workload from the snapshot', () => {
  it('counts queued stages and active attempts by shape, leaves CPU work out, and falls back to one whole GPU', () => {
    const w = snapshotWorkload({
      queue: [stage('a', share(250)), stage('b', share(250)), stage('c', null)],
      running: [attempt('r', 'id-m', [0, 1], { gpuMilli: undefined }), attempt('l', 'id-m', [2], { leaving: true })],
    });
    expect(w.requests).toBe(3);
    expect(w.shapes.map((s) => [s.gpuCount, s.gpuMilli, s.count])).toEqual([
      [1, 250, 2],
      [2, 1000, 1],
    ]);
    expect(snapshotWorkload({ queue: [stage('c', null)] }).shapes).toEqual([{ cpuMillis: 0, gpuCount: 1, gpuMilli: 1000, gpuTypes: [], count: 1, weight: 1 }]);
  });
});

// ---------------------------------------------------------------- properties

const arbMachine = (i: number) =>
  fc
    .record({
      free: fc.array(fc.constantFrom(0, 100, 250, 500, 750, 900, 1000), { minLength: 1, maxLength: 4 }),
      memGi: fc.constantFrom(undefined, 16, 24),
      type: fc.constantFrom('t4', 'a10'),
    })
    .map(({ free, memGi, type }) => machine(`m${i}`, gpus(type, free, memGi === undefined ? undefined : free.map(() => memGi))));

const arbGpu: fc.Arbitrary<Resources['gpu']> = fc.oneof(
  fc
    .record({ milli: fc.integer({ min: 1, max: 999 }), type: fc.constantFrom('t4', 'a10'), mem: fc.constantFrom(undefined, 4, 10) })
    .map(({ milli, type, mem }) => share(milli, type, mem === undefined ? undefined : mem * Gi)),
  fc.record({ count: fc.integer({ min: 1, max: 3 }), type: fc.constantFrom('t4', 'a10') }).map(({ count, type }) => whole(count, type)),
);

describe('properties of a plan with shares', () => {
  it('after any plan, under every policy: a GPU holds at most 1000 thousandths and shares within its memory, and a whole GPU never holds a share', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => arbMachine(i)))),
        fc.array(arbGpu, { minLength: 1, maxLength: 12 }),
        fc.constantFrom(...SERVER_SHARE_POLICIES),
        (machines, asks, gpuPolicy) => {
          const queue = asks.map((g, i) => stage(`s${i}`, g, { readySince: i }));
          const plan = planPlacements({ machines, queue }, { gpuPolicy });
          // Thousandths and memory held per GPU: what the snapshot had held, plus the plan's.
          const held = new Map<string, { milli: number; mem: number; whole: boolean; shares: number }>();
          for (const m of machines)
            for (const g of m.gpus)
              held.set(`${m.id}/${g.index}`, { milli: 1000 - gpuFreeMilli(g), mem: 0, whole: false, shares: gpuFreeMilli(g) < 1000 ? 1 : 0 });
          for (const p of plan.placements) {
            const milli = p.gpuMilli ?? 1000;
            if (milli < 1000) expect(p.gpuIndices).toHaveLength(1);
            for (const i of p.gpuIndices) {
              const h = held.get(`${p.machineId}/${i}`)!;
              h.milli += milli;
              h.mem += p.gpuMemoryBytes ?? 0;
              if (milli === 1000) h.whole = true;
              else h.shares += 1;
            }
          }
          for (const m of machines)
            for (const g of m.gpus) {
              const h = held.get(`${m.id}/${g.index}`)!;
              expect(h.milli).toBeLessThanOrEqual(1000);
              if (h.whole) expect(h.shares).toBe(0);
              if (h.mem > 0) expect(h.mem).toBeLessThanOrEqual(g.memoryBytesTotal ?? 0);
            }
          // Every stage is placed once or waits with a reason.
          expect(plan.placements.length + plan.pending.length).toBe(queue.length);
        },
      ),
      { numRuns: 300 },
    );
  });
});
