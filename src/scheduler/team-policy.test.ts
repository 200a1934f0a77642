import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { emptyTeamUsage, type TeamQuota } from '../domain/team.js';
import { poolOf, type Resources } from '../domain/resources.js';
import { firstReject, stageNeed } from './checks.js';
import { releaseAllocation } from './placement-fit.js';
import { planPlacements } from './plan-placements.js';
import type { MachineView, QueuedStage, RunningAttempt, SchedulerSnapshot, TeamView } from './snapshot.js';

const Gi = 1024 ** 3;

function gpuMachine(name: string, n: number, busy: number[] = [], type = 'h100'): MachineView {
  const cpu = 8000 * n;
  const mem = 32 * Gi * n;
  const held = busy.length;
  return {
    id: `id-${name}`,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    cpuMillisTotal: cpu,
    memoryBytesTotal: mem,
    cpuMillisFree: cpu - held * 1000,
    memoryBytesFree: mem - held * Gi,
    gpus: Array.from({ length: n }, (_, index) => ({ index, type, free: !busy.includes(index) })),
  };
}

function gpuStage(id: string, p: { team?: string; priority?: number; gpus?: number; preemptible?: boolean; at?: number }): QueuedStage {
  const resources: Resources = { cpuMillis: 1000, memoryBytes: Gi, gpu: { count: p.gpus ?? 1, types: ['h100'] } };
  return {
    stageId: id,
    jobId: `job-${id}`,
    stageName: id,
    pool: poolOf(resources),
    priority: p.priority ?? 50,
    readySince: p.at ?? 0,
    submittedAt: p.at ?? 0,
    resources,
    placement: { region: null, labels: {} },
    team: p.team ?? 'default',
    ...(p.preemptible ? { preemptible: true } : {}),
  };
}

function running(id: string, machine: MachineView, gpuIndices: number[], p: Partial<RunningAttempt> = {}): RunningAttempt {
  return {
    attemptId: `att-${id}`,
    token: 1,
    stageId: `stg-${id}`,
    jobId: `job-${id}`,
    stageName: id,
    machineId: machine.id,
    team: 'default',
    priority: 10,
    preemptible: true,
    cpuMillis: 1000 * gpuIndices.length,
    memoryBytes: Gi * gpuIndices.length,
    gpuIndices,
    gpuType: 'h100',
    startedAt: 0,
    stagePreemptedAt: null,
    leaving: false,
    ...p,
  };
}

const team = (name: string, p: { weight?: number; quota?: TeamQuota; gpus?: number } = {}): TeamView => ({
  name,
  weight: p.weight ?? 1,
  quota: p.quota ?? {},
  usage: { ...emptyTeamUsage(), gpus: p.gpus ? { h100: p.gpus } : {}, cpuMillis: (p.gpus ?? 0) * 1000, memoryBytes: (p.gpus ?? 0) * Gi },
});

describe('fair share', () => {
  it('serves two teams of equal weight equally, whoever submitted first', () => {
    const a = Array.from({ length: 20 }, (_, i) => gpuStage(`a${i}`, { team: 'a', at: i }));
    const b = Array.from({ length: 20 }, (_, i) => gpuStage(`b${i}`, { team: 'b', at: 100 + i }));
    const plan = planPlacements({ machines: [gpuMachine('g1', 8), gpuMachine('g2', 8)], queue: [...a, ...b], teams: [team('a'), team('b')] });
    const placedA = plan.placements.filter((p) => p.stageId.startsWith('a')).length;
    const placedB = plan.placements.filter((p) => p.stageId.startsWith('b')).length;
    expect([placedA, placedB]).toEqual([8, 8]);
  });

  it('weights: a team of weight 3 gets three times the GPUs of a team of weight 1', () => {
    const a = Array.from({ length: 20 }, (_, i) => gpuStage(`a${i}`, { team: 'a', at: i }));
    const b = Array.from({ length: 20 }, (_, i) => gpuStage(`b${i}`, { team: 'b', at: i }));
    const plan = planPlacements({ machines: [gpuMachine('g1', 8), gpuMachine('g2', 8)], queue: [...a, ...b], teams: [team('a', { weight: 3 }), team('b')] });
    expect(plan.placements.filter((p) => p.stageId.startsWith('a')).length).toBe(12);
  });

  it('counts what a team holds already: the team below its share goes first', () => {
    const m = gpuMachine('g1', 8, [0, 1, 2, 3, 4, 5]);
    const plan = planPlacements({
      machines: [m],
      queue: [
        gpuStage('a0', { team: 'a', at: 0 }),
        gpuStage('a1', { team: 'a', at: 1 }),
        gpuStage('b0', { team: 'b', at: 5 }),
        gpuStage('b1', { team: 'b', at: 6 }),
      ],
      teams: [team('a', { gpus: 6 }), team('b')],
    });
    expect(plan.placements.map((p) => p.stageId).sort()).toEqual(['b0', 'b1']);
  });

  it('priority still comes first', () => {
    const plan = planPlacements({
      machines: [gpuMachine('g1', 1)],
      queue: [gpuStage('a0', { team: 'a', priority: 90 }), gpuStage('b0', { team: 'b', priority: 10 })],
      teams: [team('a', { gpus: 100 }), team('b')],
    });
    expect(plan.placements.map((p) => p.stageId)).toEqual(['a0']);
  });
});

describe('quotas', () => {
  it('keeps a team within its quota and says so', () => {
    const plan = planPlacements({
      machines: [gpuMachine('g1', 8)],
      queue: Array.from({ length: 6 }, (_, i) => gpuStage(`v${i}`, { team: 'vision', at: i })),
      teams: [team('vision', { quota: { gpus: { h100: 4 } }, gpus: 0 })],
    });
    expect(plan.placements).toHaveLength(4);
    expect(plan.pending.find((p) => p.stageId === 'v5')?.reason).toBe('team vision at quota: uses 4 of 4 h100 GPUs, the stage needs 1');
  });

  it('says what is used, the quota and what the stage needs (1 of 2 used, needs 2: not "needs 2 more")', () => {
    const plan = planPlacements({
      machines: [gpuMachine('g1', 8, [0])],
      queue: [gpuStage('v0', { team: 'vision', gpus: 2 })],
      teams: [team('vision', { quota: { gpus: { h100: 2 } }, gpus: 1 })],
    });
    expect(plan.placements).toEqual([]);
    expect(plan.pending).toEqual([{ stageId: 'v0', reason: 'team vision at quota: uses 1 of 2 h100 GPUs, the stage needs 2', unplaceable: false }]);
  });

  it("a stage over the whole quota (a quota lowered after submit) waits as never fitting, not for its team's work to end", () => {
    const plan = planPlacements({
      machines: [gpuMachine('g1', 8)],
      queue: [gpuStage('v0', { team: 'vision', gpus: 4 }), gpuStage('v1', { team: 'vision', gpus: 4, preemptible: true })],
      teams: [team('vision', { quota: { gpus: { h100: 2 } }, gpus: 0 })],
    });
    expect(plan.pending).toEqual([
      {
        stageId: 'v0',
        reason:
          "team vision's quota is 2 h100 GPUs, the stage needs 4: it can never run within the quota (raise the quota, or make the stage preemptible so it may borrow)",
        unplaceable: true,
      },
    ]);
    // The preemptible one borrows idle capacity beyond the quota.
    expect(plan.placements.map((p) => p.stageId)).toEqual(['v1']);
  });

  it('lets preemptible work borrow idle capacity beyond the quota', () => {
    const plan = planPlacements({
      machines: [gpuMachine('g1', 8)],
      queue: Array.from({ length: 6 }, (_, i) => gpuStage(`v${i}`, { team: 'vision', at: i, preemptible: true })),
      teams: [team('vision', { quota: { gpus: { h100: 4 } } })],
    });
    expect(plan.placements).toHaveLength(6);
  });

  it('property: a team never goes past its quota except with preemptible (reclaimable) work', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            team: fc.constantFrom('a', 'b', 'c'),
            gpus: fc.integer({ min: 1, max: 3 }),
            preemptible: fc.boolean(),
            priority: fc.integer({ min: 0, max: 3 }),
          }),
          { maxLength: 40 },
        ),
        fc.record({ a: fc.integer({ min: 0, max: 8 }), b: fc.integer({ min: 0, max: 8 }) }),
        fc.integer({ min: 1, max: 4 }),
        (specs, quotas, machineCount) => {
          const machines = Array.from({ length: machineCount }, (_, i) => gpuMachine(`g${i}`, 4));
          const queue = specs.map((s, i) => gpuStage(`s${i}`, { ...s, priority: s.priority * 10, at: i }));
          const teams = [team('a', { quota: { gpus: { h100: quotas.a } } }), team('b', { quota: { gpus: { h100: quotas.b } } }), team('c')];
          const plan = planPlacements({ machines, queue, teams });
          for (const t of ['a', 'b'] as const) {
            const firm = plan.placements
              .filter((p) => {
                const s = queue.find((q) => q.stageId === p.stageId)!;
                return s.team === t && !s.preemptible;
              })
              .reduce((n, p) => n + p.gpuIndices.length, 0);
            expect(firm).toBeLessThanOrEqual(quotas[t]);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('preemption', () => {
  it('stops the fewest GPU-seconds of lower-priority preemptible work on one machine', () => {
    const g1 = gpuMachine('g1', 4, [0, 1, 2, 3]);
    const g2 = gpuMachine('g2', 4, [0, 1, 2, 3]);
    const plan = planPlacements({
      machines: [g1, g2],
      queue: [gpuStage('big', { priority: 900, gpus: 2 })],
      running: [
        running('old1', g1, [0, 1], { startedAt: 0 }),
        running('old2', g1, [2, 3], { startedAt: 0 }),
        running('new1', g2, [0], { startedAt: 90_000 }),
        running('new2', g2, [1], { startedAt: 95_000 }),
        running('firm', g2, [2, 3], { preemptible: false }),
      ],
      now: 100_000,
    });
    expect(plan.placements).toEqual([]);
    expect(plan.preemptions).toEqual([
      {
        stageId: 'big',
        machineId: 'id-g2',
        victims: [
          { attemptId: 'att-new2', token: 1, stageId: 'stg-new2' },
          { attemptId: 'att-new1', token: 1, stageId: 'stg-new1' },
        ],
        reason: expect.stringContaining('priority 900 over 10'),
      },
    ]);
    expect(plan.reservations).toEqual([{ stageId: 'big', machineId: 'id-g2' }]);
  });

  it('waits for attempts already leaving instead of stopping more', () => {
    const g1 = gpuMachine('g1', 2, [0, 1]);
    const plan = planPlacements({
      machines: [g1],
      queue: [gpuStage('big', { priority: 900, gpus: 2 })],
      running: [running('going', g1, [0, 1], { leaving: true }), running('other', g1, [], { cpuMillis: 0, memoryBytes: 0 })],
      now: 1000,
    });
    expect(plan.preemptions).toBeUndefined();
    expect(plan.reservations).toEqual([{ stageId: 'big', machineId: 'id-g1' }]);
  });

  it('does not preempt a stage twice within the cool-down, nor equal priorities', () => {
    const g1 = gpuMachine('g1', 1, [0]);
    const base = { machines: [g1], queue: [gpuStage('hi', { priority: 50 })], now: 1_000_000, preemptionCooldownMs: 300_000 };
    expect(planPlacements({ ...base, running: [running('eq', g1, [0], { priority: 50 })] }).preemptions).toBeUndefined();
    expect(planPlacements({ ...base, running: [running('recent', g1, [0], { priority: 10, stagePreemptedAt: 900_000 })] }).preemptions).toBeUndefined();
    expect(planPlacements({ ...base, running: [running('old', g1, [0], { priority: 10, stagePreemptedAt: 100_000 })] }).preemptions).toHaveLength(1);
  });

  it('a team within its quota reclaims what a borrowing team took, at any priority', () => {
    const g1 = gpuMachine('g1', 4, [0, 1, 2, 3]);
    const plan = planPlacements({
      machines: [g1],
      queue: [gpuStage('mine', { team: 'vision', priority: 10 })],
      teams: [team('vision', { quota: { gpus: { h100: 2 } } }), team('nlp', { quota: { gpus: { h100: 1 } }, gpus: 4 })],
      running: [0, 1, 2, 3].map((i) => running(`nlp${i}`, g1, [i], { team: 'nlp', priority: 50, startedAt: i * 1000 })),
      now: 10_000,
    });
    expect(plan.preemptions?.[0]?.victims).toEqual([{ attemptId: 'att-nlp3', token: 1, stageId: 'stg-nlp3' }]);
    expect(plan.preemptions?.[0]?.reason).toContain('reclaiming');
  });

  it('property: a preemption always frees enough, and never takes non-preemptible or equal-or-higher priority work unless reclaiming from a borrower', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ gpus: fc.integer({ min: 1, max: 4 }), priority: fc.integer({ min: 0, max: 9 }) }), { minLength: 1, maxLength: 6 }),
        fc.array(
          fc.record({
            machine: fc.integer({ min: 0, max: 2 }),
            gpus: fc.integer({ min: 1, max: 2 }),
            priority: fc.integer({ min: 0, max: 9 }),
            preemptible: fc.boolean(),
            startedAt: fc.integer({ min: 0, max: 10_000 }),
            leaving: fc.boolean(),
          }),
          { maxLength: 12 },
        ),
        (stages, runs) => {
          const machines = [gpuMachine('g0', 4), gpuMachine('g1', 4), gpuMachine('g2', 4)];
          const attempts: RunningAttempt[] = [];
          for (const [i, r] of runs.entries()) {
            const m = machines[r.machine]!;
            const free = m.gpus.filter((g) => g.free).slice(0, r.gpus);
            if (free.length < r.gpus) continue;
            for (const g of free) g.free = false;
            m.cpuMillisFree -= 1000 * r.gpus;
            m.memoryBytesFree -= Gi * r.gpus;
            attempts.push(
              running(
                `r${i}`,
                m,
                free.map((g) => g.index),
                { priority: r.priority * 10, preemptible: r.preemptible, startedAt: r.startedAt, leaving: r.leaving },
              ),
            );
          }
          const queue = stages.map((s, i) => gpuStage(`s${i}`, { gpus: s.gpus, priority: s.priority * 10, at: i }));
          const snapshot: SchedulerSnapshot = { machines, queue, running: attempts, now: 20_000 };
          const plan = planPlacements(snapshot);
          const victimsSeen = new Set<string>();
          for (const pre of plan.preemptions ?? []) {
            const stage = queue.find((q) => q.stageId === pre.stageId)!;
            const m = { ...machines.find((x) => x.id === pre.machineId)! };
            m.gpus = m.gpus.map((g) => ({ ...g }));
            for (const a of attempts.filter((x) => x.machineId === m.id && x.leaving)) releaseAllocation(m, a);
            for (const v of pre.victims) {
              expect(victimsSeen.has(v.attemptId)).toBe(false);
              victimsSeen.add(v.attemptId);
              const a = attempts.find((x) => x.attemptId === v.attemptId)!;
              expect(a.machineId).toBe(pre.machineId);
              expect(a.preemptible).toBe(true);
              expect(a.leaving).toBe(false);
              expect(a.priority).toBeLessThan(stage.priority);
              releaseAllocation(m, a);
            }
            expect(firstReject(stageNeed(stage), m)).toBeNull();
          }
        },
      ),
      { numRuns: 400 },
    );
  });
});

describe('whole-machine stages', () => {
  it('small GPU stages pack onto a machine already in use, so an 8-GPU stage finds a whole machine', () => {
    const plan = planPlacements({
      machines: [gpuMachine('a', 8), gpuMachine('b', 8, [0])],
      queue: [gpuStage('one', { at: 0 }), gpuStage('two', { at: 1 }), gpuStage('whole', { gpus: 8, at: 2 })],
    });
    expect(plan.placements.map((p) => [p.stageId, p.machineId])).toEqual([
      ['one', 'id-b'],
      ['two', 'id-b'],
      ['whole', 'id-a'],
    ]);
  });
});

describe('backfill onto a held machine', () => {
  const timed = (id: string, timeoutSeconds: number | null, at: number) => ({ ...gpuStage(id, { at, priority: 10 }), timeoutSeconds });
  const setup = (blockerEnds: number | null) => {
    const m = gpuMachine('g', 4, [0, 1]);
    return {
      machines: [m],
      queue: [gpuStage('big', { gpus: 4, priority: 90 }), timed('short', 50, 1), timed('endless', null, 2), timed('long', 200, 3)],
      now: 0,
      heldUntil: [{ machineId: m.id, gpuIndices: [0, 1], cpuMillis: 2000, memoryBytes: 2 * Gi, endsBy: blockerEnds }],
    } satisfies SchedulerSnapshot;
  };

  it('places a stage that ends before the held stage could start, and nothing that might delay it', () => {
    const plan = planPlacements(setup(100_000));
    expect(plan.reservations).toEqual([{ stageId: 'big', machineId: 'id-g' }]);
    expect(plan.placements.map((p) => p.stageId)).toEqual(['short']);
  });

  it('backfills nothing when what holds the machine has no time limit (its start is unknown)', () => {
    expect(planPlacements(setup(null)).placements).toEqual([]);
  });

  it('without the time limits (a first plan), a held machine takes nothing', () => {
    const { heldUntil: _, ...rest } = setup(100_000);
    expect(planPlacements(rest).placements).toEqual([]);
  });
});
