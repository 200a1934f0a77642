/**
 * Preemption of gangs and for gangs (issue 31, docs/gangs.md "Preemption"): a waiting gang stops
 * lower-priority work on exactly its size of machines or on none, and a running gang chosen as a
 * victim is taken and costed whole.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { poolOf, type Resources } from '../domain/resources.js';
import { firstReject, stageNeed } from './checks.js';
import { placementMembers } from './placement-members.js';
import { releaseAllocation, takeAllocation } from './placement-fit.js';
import { MAX_PREEMPTIONS_PER_PASS, planPlacements as planAny } from './plan-placements.js';
import type { MachineView, Plan, QueuedStage, RunningAttempt, SchedulerSnapshot } from './snapshot.js';

const Gi = 1024 ** 3;

const planPlacements = (snapshot: SchedulerSnapshot) => planAny(snapshot, { gangs: true });

function machine(name: string, labels: Record<string, string> = {}, n = 8): MachineView {
  return {
    id: `id-${name}`,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels,
    gpus: Array.from({ length: n }, (_, index) => ({ index, type: 'h100', free: true })),
    cpuMillisTotal: 64_000,
    memoryBytesTotal: 512 * Gi,
    cpuMillisFree: 64_000,
    memoryBytesFree: 512 * Gi,
  };
}

function stage(stageId: string, p: { machines?: number; gpus?: number; priority?: number; sameLabel?: string; at?: number } = {}): QueuedStage {
  const resources: Resources = { cpuMillis: 1000, memoryBytes: Gi, gpu: { count: p.gpus ?? 8, types: ['h100'] } };
  if (p.machines !== undefined) resources.machines = p.machines;
  return {
    stageId,
    jobId: `job-${stageId}`,
    stageName: stageId,
    pool: poolOf(resources),
    priority: p.priority ?? 900,
    readySince: p.at ?? 0,
    submittedAt: p.at ?? 0,
    resources,
    placement: { region: null, labels: {}, ...(p.sameLabel !== undefined ? { sameLabel: p.sameLabel } : {}) },
  };
}

/** An attempt on `m` (its room taken from the machine's free room), 8 GPUs by default. */
function run(id: string, m: MachineView, p: Partial<RunningAttempt> & { gpus?: number } = {}): RunningAttempt {
  const { gpus = 8, ...rest } = p;
  const gpuIndices = m.gpus
    .filter((g) => g.free)
    .slice(0, gpus)
    .map((g) => g.index);
  const a: RunningAttempt = {
    attemptId: `att-${id}`,
    token: 1,
    stageId: `stg-${id}`,
    jobId: `job-${id}`,
    stageName: id,
    machineId: m.id,
    team: 'default',
    priority: 10,
    preemptible: true,
    cpuMillis: 1000,
    memoryBytes: Gi,
    gpuIndices,
    gpuType: 'h100',
    startedAt: 0,
    stagePreemptedAt: null,
    leaving: false,
    ...rest,
  };
  takeAllocation(m, a);
  return a;
}

/** A running gang: one member on each machine, ranks in order, all of one stage. */
function runGang(id: string, ms: MachineView[], p: Partial<RunningAttempt> & { gpus?: number } = {}): RunningAttempt[] {
  return ms.map((m, rank) =>
    run(`${id}-${rank}`, m, { stageId: `stg-${id}`, jobId: `job-${id}`, stageName: id, gang: { id: `att-${id}-0`, size: ms.length, rank }, ...p }),
  );
}

const heldFor = (plan: Plan, stageId: string) =>
  (plan.reservations ?? [])
    .filter((r) => r.stageId === stageId)
    .map((r) => r.machineId)
    .sort();
const victimsOf = (plan: Plan) => (plan.preemptions ?? []).flatMap((p) => p.victims.map((v) => v.attemptId));

describe('a gang as a preemptor', () => {
  it('stops lower-priority work on exactly its size of machines, the least work lost, one preemption per machine', () => {
    const ms = ['m1', 'm2', 'm3', 'm4'].map((n) => machine(n));
    // Started at 0, 40, 80, 60 s: the newest lose least.
    const running = [
      run('a', ms[0]!, { startedAt: 0 }),
      run('b', ms[1]!, { startedAt: 40_000 }),
      run('c', ms[2]!, { startedAt: 80_000 }),
      run('d', ms[3]!, { startedAt: 60_000 }),
    ];
    const plan = planPlacements({ machines: ms, queue: [stage('train', { machines: 2 })], running, now: 100_000 });
    expect(plan.placements).toEqual([]);
    expect(plan.preemptions).toEqual([
      { stageId: 'train', machineId: 'id-m3', victims: [{ attemptId: 'att-c', token: 1, stageId: 'stg-c' }], reason: expect.any(String) },
      { stageId: 'train', machineId: 'id-m4', victims: [{ attemptId: 'att-d', token: 1, stageId: 'stg-d' }], reason: expect.any(String) },
    ]);
    expect(plan.preemptions![0]!.reason).toBe('preempted on m3 for stage train of job job-train (gang of 2, priority 900 over 10)');
    // Held its whole set, the machines it will run on.
    expect(heldFor(plan, 'train')).toEqual(['id-m3', 'id-m4']);
  });

  it('never partly: fewer machines than its size can be made to fit, nothing is stopped', () => {
    const ms = ['m1', 'm2', 'm3'].map((n) => machine(n));
    const running = [run('a', ms[0]!), run('b', ms[1]!), run('firm', ms[2]!, { preemptible: false })];
    const plan = planPlacements({ machines: ms, queue: [stage('train', { machines: 3 })], running, now: 100_000 });
    expect(plan.preemptions).toBeUndefined();
    // A higher priority, not preemptible: the same.
    const ms2 = ['m1', 'm2', 'm3'].map((n) => machine(n));
    const running2 = [run('a', ms2[0]!), run('b', ms2[1]!), run('high', ms2[2]!, { priority: 950 })];
    expect(planPlacements({ machines: ms2, queue: [stage('train', { machines: 3 })], running: running2, now: 100_000 }).preemptions).toBeUndefined();
  });

  it('never preempts equal priority', () => {
    const ms = ['m1', 'm2'].map((n) => machine(n));
    const running = [run('a', ms[0]!, { priority: 900 }), run('b', ms[1]!, { priority: 900 })];
    expect(planPlacements({ machines: ms, queue: [stage('train', { machines: 2 })], running, now: 100_000 }).preemptions).toBeUndefined();
  });

  it('keeps sameLabel: all its machines in one rack, the rack of least total loss', () => {
    const a = [machine('a1', { rack: 'a' }), machine('a2', { rack: 'a' })];
    const b = [machine('b1', { rack: 'b' }), machine('b2', { rack: 'b' })];
    // Rack a: the cheapest machine (90 s lost) and the dearest (1000 s); rack b: 500 s each. Rack b
    // loses 8000 GPU-seconds against a's 8720 (the cheapest two machines overall, a1 and b1, would
    // straddle racks).
    const running = [
      run('a1', a[0]!, { startedAt: 910_000 }),
      run('a2', a[1]!, { startedAt: 0 }),
      run('b1', b[0]!, { startedAt: 500_000 }),
      run('b2', b[1]!, { startedAt: 500_000 }),
    ];
    const plan = planPlacements({ machines: [...a, ...b], queue: [stage('train', { machines: 2, sameLabel: 'rack' })], running, now: 1_000_000 });
    expect(plan.preemptions?.map((p) => p.machineId)).toEqual(['id-b1', 'id-b2']);
    expect(heldFor(plan, 'train')).toEqual(['id-b1', 'id-b2']);
  });

  it('prefers free machines: stops work only where it must, and holds the free one with them', () => {
    const ms = ['m1', 'm2', 'm3'].map((n) => machine(n));
    // m1 is idle; m2 and m3 busy.
    const running = [run('b', ms[1]!, { startedAt: 10_000 }), run('c', ms[2]!, { startedAt: 20_000 })];
    const plan = planPlacements({ machines: ms, queue: [stage('train', { machines: 3 })], running, now: 100_000 });
    expect(plan.preemptions?.map((p) => p.machineId)).toEqual(['id-m2', 'id-m3']);
    const two = planPlacements({
      machines: ['m1', 'm2', 'm3'].map((n) => machine(n)),
      queue: [stage('train', { machines: 2 })],
      running: [],
      now: 100_000,
    });
    // (Sanity: with nothing running it is simply placed.)
    expect(two.placements).toHaveLength(1);
    const ms3 = ['m1', 'm2', 'm3'].map((n) => machine(n));
    const r3 = [run('b', ms3[1]!, { startedAt: 10_000 }), run('c', ms3[2]!, { startedAt: 20_000 }), run('x', ms3[0]!, { gpus: 4, startedAt: 90_000 })];
    // m1 has a small, recent attempt: the cheapest stop; of m2 and m3, m3's is the newer.
    const plan3 = planPlacements({ machines: ms3, queue: [stage('train', { machines: 2 })], running: r3, now: 100_000 });
    expect(plan3.preemptions?.map((p) => [p.machineId, p.victims.map((v) => v.attemptId)])).toEqual([
      ['id-m1', ['att-x']],
      ['id-m3', ['att-c']],
    ]);
  });

  it('waits, holding its set, when its machines are free or already freeing: nothing is stopped', () => {
    const ms = ['m1', 'm2', 'm3'].map((n) => machine(n));
    const running = [run('going', ms[1]!, { leaving: true }), run('c', ms[2]!, { startedAt: 99_000 }), run('x', ms[0]!, { gpus: 1, leaving: true })];
    const plan = planPlacements({ machines: ms, queue: [stage('train', { machines: 2 })], running, now: 100_000 });
    expect(plan.preemptions).toBeUndefined();
    expect(heldFor(plan, 'train')).toEqual(['id-m1', 'id-m2']);
  });

  it('counts once against the preemptions of a pass, whatever its machines', () => {
    const n = MAX_PREEMPTIONS_PER_PASS + 2;
    const ms = Array.from({ length: n }, (_, i) => machine(`m${String(i).padStart(2, '0')}`));
    const running = ms.map((m, i) => run(`r${i}`, m));
    const plan = planPlacements({ machines: ms, queue: [stage('train', { machines: n }), stage('single', { priority: 800, at: 1 })], running, now: 100_000 });
    expect(plan.preemptions).toHaveLength(n);
    expect(new Set(plan.preemptions!.map((p) => p.stageId))).toEqual(new Set(['train']));
  });

  it('costs a victim gang once when it spans two of the machines it takes', () => {
    const ms = ['m1', 'm2', 'm3', 'm4'].map((n) => machine(n));
    // A low gang on m1, m2 from 20 s: 2 × 8 × 80 = 1280 GPU-seconds; singles on m3, m4 from 0: 1600.
    const running = [...runGang('low', [ms[0]!, ms[1]!], { startedAt: 20_000 }), run('c', ms[2]!), run('d', ms[3]!)];
    const plan = planPlacements({ machines: ms, queue: [stage('train', { machines: 2 })], running, now: 100_000 });
    // One preemption (on m1) takes the whole low gang; m2 is then room that is leaving.
    expect(plan.preemptions?.map((p) => [p.machineId, p.victims.map((v) => v.attemptId)])).toEqual([['id-m1', ['att-low-0', 'att-low-1']]]);
    expect(heldFor(plan, 'train')).toEqual(['id-m1', 'id-m2']);
  });
});

describe('a gang as a victim', () => {
  it('costs every member: a single attempt losing less than the whole gang is stopped instead', () => {
    const ms = ['m1', 'm2', 'm3', 'm4'].map((n) => machine(n));
    // Each member lost 8 × 500 = 4000 GPU-seconds (the gang 12,000); the single on m4 8000.
    const running = [...runGang('low', ms.slice(0, 3), { startedAt: 500_000 }), run('single', ms[3]!)];
    const plan = planPlacements({ machines: ms, queue: [stage('hi')], running, now: 1_000_000 });
    expect(victimsOf(plan)).toEqual(['att-single']);
  });

  it('is taken whole: every member a victim, the one on the machine first, and its other machines are room leaving for later stages', () => {
    const ms = ['m1', 'm2', 'm3', 'm4'].map((n) => machine(n));
    const running = [...runGang('low', ms.slice(0, 3), { startedAt: 500_000 }), run('firm', ms[3]!, { preemptible: false })];
    const plan = planPlacements({ machines: ms, queue: [stage('hi'), stage('next', { priority: 800, at: 1 })], running, now: 1_000_000 });
    expect(plan.preemptions).toEqual([
      {
        stageId: 'hi',
        machineId: 'id-m1',
        victims: [0, 1, 2].map((r) => ({ attemptId: `att-low-${r}`, token: 1, stageId: 'stg-low' })),
        reason: 'preempted on m1 for stage hi of job job-hi (priority 900 over 10)',
      },
    ]);
    // The next stage waits for the gang's room on m2, stopping nothing more.
    expect(heldFor(plan, 'next')).toEqual(['id-m2']);
  });

  it('is never taken by equal priority', () => {
    const ms = ['m1', 'm2'].map((n) => machine(n));
    const running = runGang('peer', ms, { priority: 900 });
    expect(planPlacements({ machines: ms, queue: [stage('hi')], running, now: 1_000_000 }).preemptions).toBeUndefined();
  });
});

describe('gang preemption, over random clusters', () => {
  it('property: a gang preempts on exactly its size of distinct machines of one rack or none, taking only lower-priority preemptible work, gangs whole, and each machine then fits a member', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 4 }),
        fc.boolean(),
        fc.array(
          fc.record({
            machine: fc.integer({ min: 0, max: 5 }),
            gpus: fc.integer({ min: 1, max: 8 }),
            priority: fc.integer({ min: 0, max: 9 }),
            preemptible: fc.boolean(),
            startedAt: fc.integer({ min: 0, max: 10_000 }),
            leaving: fc.boolean(),
          }),
          { maxLength: 14 },
        ),
        fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 2, maxLength: 3 }),
        (size, sameLabel, runs, victimGang) => {
          const ms = Array.from({ length: 6 }, (_, i) => machine(`m${i}`, { rack: i < 3 ? 'a' : 'b' }));
          const running: RunningAttempt[] = [];
          // A running low gang on distinct machines, when they have room.
          const gm = [...new Set(victimGang)].map((i) => ms[i]!);
          if (gm.length >= 2 && gm.every((m) => m.gpus.filter((g) => g.free).length >= 2))
            running.push(...runGang('lowgang', gm, { priority: 0, startedAt: 5_000, gpus: 2 }));
          for (const [i, r] of runs.entries()) {
            const m = ms[r.machine]!;
            if (m.gpus.filter((g) => g.free).length < r.gpus) continue;
            running.push(run(`r${i}`, m, { gpus: r.gpus, priority: r.priority * 100, preemptible: r.preemptible, startedAt: r.startedAt, leaving: r.leaving }));
          }
          const before = ms.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) }));
          const gang = stage('train', { machines: size, priority: 500, ...(sameLabel ? { sameLabel: 'rack' } : {}) });
          const plan = planPlacements({ machines: ms, queue: [gang], running, now: 20_000 });
          const member = stageNeed(gang);
          const byId = new Map(running.map((a) => [a.attemptId, a]));
          const placed = plan.placements.find((p) => p.stageId === 'train');
          if (placed) {
            expect(placementMembers(placed)).toHaveLength(size);
            expect(plan.preemptions).toBeUndefined();
            return;
          }
          if (!plan.preemptions) return;
          const held = heldFor(plan, 'train');
          expect(new Set(held).size).toBe(size);
          if (sameLabel) expect(new Set(held.map((id) => before.find((m) => m.id === id)!.labels.rack)).size).toBe(1);
          const victims = victimsOf(plan).map((id) => byId.get(id)!);
          expect(new Set(victims.map((v) => v.attemptId)).size).toBe(victims.length);
          for (const v of victims) {
            expect(v.preemptible && !v.leaving && v.priority < 500).toBe(true);
            // A gang's member: every active member of it is a victim too.
            if (v.gang) for (const peer of running.filter((a) => a.gang?.id === v.gang!.id && !a.leaving)) expect(victims).toContain(peer);
          }
          for (const p of plan.preemptions) expect(held).toContain(p.machineId);
          // Each held machine, once its victims and leaving attempts are gone, fits a member.
          const gone = new Set(victims.map((v) => v.attemptId));
          for (const id of held) {
            const copy = before.find((m) => m.id === id)!;
            for (const a of running) if (a.machineId === id && (a.leaving || gone.has(a.attemptId))) releaseAllocation(copy, a);
            expect(firstReject(member, copy)).toBeNull();
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
