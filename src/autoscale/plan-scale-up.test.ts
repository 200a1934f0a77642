import { describe, expect, it } from 'vitest';
import { emptyTeamUsage } from '../domain/team.js';
import { poolOf, type Resources } from '../domain/resources.js';
import { planPlacements } from '../scheduler/plan-placements.js';
import type { MachineView, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';
import { templateMachine, type PoolTemplate } from './pool-template.js';
import { planScaleUp, type PoolState, type ScaleUpPlan } from './plan-scale-up.js';

const Gi = 1024 ** 3;
const NOW = 1_000_000;

function pool(
  name: string,
  p: { gpus?: number; type?: string; cpu?: number; memGi?: number; min?: number; max?: number; perInterval?: number; region?: string; spare?: number },
): PoolTemplate {
  return {
    name,
    template: {
      cpuMillis: (p.cpu ?? 32) * 1000,
      memoryBytes: (p.memGi ?? 256) * Gi,
      gpus: p.gpus ? { type: p.type ?? 'h100', count: p.gpus } : null,
      region: p.region ?? null,
      labels: {},
    },
    autoscale: {
      provider: 'local',
      command: null,
      min: p.min ?? 0,
      max: p.max ?? 100,
      idleSeconds: 300,
      bootTimeoutSeconds: 600,
      maxStartsPerInterval: p.perInterval ?? null,
      spareMachines: p.spare ?? 0,
    },
  };
}

function stage(id: string, p: { gpus?: number; types?: string[]; team?: string; cpu?: number; memGi?: number; region?: string }): QueuedStage {
  const resources: Resources = {
    cpuMillis: (p.cpu ?? 4) * 1000,
    memoryBytes: (p.memGi ?? 16) * Gi,
    gpu: p.gpus ? { count: p.gpus, types: p.types ?? ['h100'] } : null,
  };
  return {
    stageId: id,
    jobId: `job-${id}`,
    stageName: id,
    pool: poolOf(resources),
    priority: 50,
    readySince: 0,
    resources,
    placement: { region: p.region ?? null, labels: {} },
    ...(p.team ? { team: p.team } : {}),
  };
}

function many(n: number, prefix: string, p: Parameters<typeof stage>[1]): QueuedStage[] {
  return Array.from({ length: n }, (_, i) => stage(`${prefix}${i}`, p));
}

/** A machine of the pool that joined, with every GPU busy. */
function busyMachine(p: PoolTemplate, id: string): MachineView {
  const m = templateMachine(p.template, id);
  for (const g of m.gpus) Object.assign(g, { free: false, freeMilli: 0 });
  return m;
}

function scaleUp(snapshot: SchedulerSnapshot, pools: PoolTemplate[], state: PoolState[] = [], maxStartsPerDecision?: number): ScaleUpPlan {
  // The plan as the server's pass makes it: gangs whole.
  const plan = planPlacements(snapshot, { gangs: true });
  return planScaleUp({ snapshot, plan, pools, state, now: NOW, ...(maxStartsPerDecision !== undefined ? { maxStartsPerDecision } : {}) });
}

/** A gang of `size` members, each on its own machine with `gpus` GPUs (resources.machines, docs/gangs.md). */
function gang(id: string, size: number, gpus: number, p: { team?: string; priority?: number } = {}): QueuedStage {
  const s = stage(id, { gpus, ...(p.team ? { team: p.team } : {}) });
  return { ...s, priority: p.priority ?? s.priority, resources: { ...s.resources, machines: size } };
}

const count = (plan: ScaleUpPlan) => Object.fromEntries(plan.starts.map((s) => [s.pool, s.count]));
const kinds = (plan: ScaleUpPlan) => Object.fromEntries(plan.waiting.map((w) => [w.stageId, w.kind]));

describe('planScaleUp', () => {
  const h100 = pool('h100', { gpus: 8 });

  it('a burst of 8-GPU stages asks one machine each, in words', () => {
    const plan = scaleUp({ machines: [], queue: many(3, 's', { gpus: 8, team: 'vision' }) }, [h100]);
    expect(plan.starts).toEqual([
      {
        pool: 'h100',
        count: 3,
        stageIds: ['s0', 's1', 's2'],
        machineStages: [['s0'], ['s1'], ['s2']],
        reason: '3 stages of team vision wait for 8 h100 GPUs: starting 3 machines of template h100',
      },
    ]);
    expect(plan.waiting).toEqual([]);
  });

  it('bin-packs: five 4-GPU stages need ceil(5 × 4 / 8) = 3 machines of 8 GPUs', () => {
    const plan = scaleUp({ machines: [], queue: many(5, 's', { gpus: 4 }) }, [h100]);
    expect(count(plan)).toEqual({ h100: 3 });
    expect(plan.starts[0]!.stageIds.sort()).toEqual(['s0', 's1', 's2', 's3', 's4']);
  });

  it('never above max: machines up count, the rest wait at max', () => {
    const small = pool('h100', { gpus: 8, max: 4 });
    const plan = scaleUp(
      { machines: [busyMachine(small, 'up-1')], queue: many(10, 's', { gpus: 8 }) },
      [small],
      [{ pool: 'h100', counted: 1, starting: 0, startedThisInterval: 0 }],
    );
    expect(count(plan)).toEqual({ h100: 3 });
    const atMax = plan.waiting.filter((w) => w.kind === 'at-max');
    expect(atMax).toHaveLength(7);
    expect(atMax[0]!.reason).toBe('template h100 is at its max of 4 machines (1 up or starting)');
  });

  it('a machine starting for a stage is held for it: a later stage of a higher priority needs its own', () => {
    // s0 (priority 50) waits for the machine started for it; hi (priority 90) came after. The pass
    // would give hi the first machine to join; held, it goes to s0 and hi gets a start of its own.
    const hi = { ...stage('hi', { gpus: 8 }), priority: 90, readySince: 5000 };
    const queue = [stage('s0', { gpus: 8 }), hi];
    const held = scaleUp({ machines: [], queue }, [h100], [{ pool: 'h100', counted: 1, starting: 1, startedThisInterval: 1, startingFor: [['s0']] }]);
    expect(held.starts).toMatchObject([{ pool: 'h100', count: 1, stageIds: ['hi'], machineStages: [['hi']] }]);
    expect(kinds(held)).toEqual({ s0: 'starting' });
    // Not held (no startingFor), the simulated pass gives the starting machine to hi, by priority.
    const free = scaleUp({ machines: [], queue }, [h100], [{ pool: 'h100', counted: 1, starting: 1, startedThisInterval: 1 }]);
    expect(free.starts).toMatchObject([{ pool: 'h100', count: 1, stageIds: ['s0'] }]);
    expect(kinds(free)).toEqual({ hi: 'starting' });
  });

  it("a stage counted onto a starting machine's spare room is told which, to be held there too", () => {
    // Machine 0 starts for s0 (4 GPUs); s1 (4 GPUs) fits its other half; machine 1 holds s2.
    const queue = [stage('s0', { gpus: 4 }), stage('s1', { gpus: 4 }), stage('s2', { gpus: 8 })];
    const plan = scaleUp({ machines: [], queue }, [h100], [{ pool: 'h100', counted: 2, starting: 2, startedThisInterval: 2, startingFor: [['s0'], ['s2']] }]);
    expect(plan.starts).toEqual([]);
    expect(plan.waiting.map((w) => [w.stageId, w.kind, w.startingOn])).toEqual([
      ['s0', 'starting', [{ pool: 'h100', index: 0 }]],
      ['s1', 'starting', [{ pool: 'h100', index: 0 }]],
      ['s2', 'starting', [{ pool: 'h100', index: 1 }]],
    ]);
  });

  it('a stage held on a starting machine that is no longer waiting holds nothing there', () => {
    const plan = scaleUp(
      { machines: [], queue: [stage('s1', { gpus: 8 })] },
      [h100],
      [{ pool: 'h100', counted: 1, starting: 1, startedThisInterval: 1, startingFor: [['gone']] }],
    );
    expect(plan.starts).toEqual([]);
    expect(kinds(plan)).toEqual({ s1: 'starting' });
  });

  it('shares: four quarter-GPU stages start one machine of 1 GPU, not four', () => {
    const one = pool('t4', { gpus: 1, type: 't4' });
    const quarter = (id: string): QueuedStage => {
      const s = stage(id, { gpus: 1, types: ['t4'], cpu: 1, memGi: 2 });
      return { ...s, resources: { ...s.resources, gpu: { count: 1, types: ['t4'], milli: 250 } } };
    };
    const plan = scaleUp({ machines: [], queue: ['q0', 'q1', 'q2', 'q3'].map(quarter) }, [one]);
    expect(plan.starts).toMatchObject([{ pool: 't4', count: 1, machineStages: [['q0', 'q1', 'q2', 'q3']] }]);
  });

  it('machines already starting count as supply', () => {
    const plan = scaleUp({ machines: [], queue: many(3, 's', { gpus: 8 }) }, [h100], [{ pool: 'h100', counted: 2, starting: 2, startedThisInterval: 2 }]);
    expect(count(plan)).toEqual({ h100: 1 });
    const starting = plan.waiting.filter((w) => w.kind === 'starting');
    expect(starting).toHaveLength(2);
    expect(starting[0]).toMatchObject({ pool: 'h100', reason: 'a machine of template h100 is starting for it, up to 600 s' });
  });

  it('at most N starts per interval', () => {
    const limited = pool('h100', { gpus: 8, perInterval: 2 });
    const plan = scaleUp({ machines: [], queue: many(4, 's', { gpus: 8 }) }, [limited], [{ pool: 'h100', counted: 0, starting: 0, startedThisInterval: 1 }]);
    expect(count(plan)).toEqual({ h100: 1 });
    expect(plan.waiting.map((w) => w.kind)).toEqual(['start-limit', 'start-limit', 'start-limit']);
    expect(plan.waiting[0]!.reason).toBe('template h100 has started its 2 machines for this interval');
  });

  it('at most maxStartsPerDecision new machines in one decision; the rest is looked at next time', () => {
    const snapshot: SchedulerSnapshot = { machines: [], queue: many(5, 's', { gpus: 8 }) };
    const plan = planScaleUp({ snapshot, plan: planPlacements(snapshot), pools: [h100], state: [], now: NOW, maxStartsPerDecision: 2 });
    expect(count(plan)).toEqual({ h100: 2 });
    expect(plan.waiting.map((w) => w.kind)).toEqual(['decision-limit', 'decision-limit', 'decision-limit']);
    expect(plan.waiting[0]!.reason).toBe('this decision started its most (2 machines): the next interval looks at it again');
  });

  it('a pool backing off after a failed boot starts nothing', () => {
    const plan = planScaleUp({
      snapshot: { machines: [], queue: many(1, 's', { gpus: 8 }) },
      plan: planPlacements({ machines: [], queue: many(1, 's', { gpus: 8 }) }),
      pools: [h100],
      state: [{ pool: 'h100', counted: 0, starting: 0, startedThisInterval: 0, backoffUntil: NOW + 1 }],
      now: NOW,
    });
    expect(plan.starts).toEqual([]);
    expect(kinds(plan)).toEqual({ s0: 'backoff' });
  });

  it('a stage blocked by its team quota starts nothing, and says so', () => {
    const snapshot: SchedulerSnapshot = {
      machines: [busyMachine(h100, 'up-1')],
      queue: [stage('q', { gpus: 8, team: 'vision' })],
      teams: [{ name: 'vision', weight: 1, quota: { gpus: { h100: 8 } }, usage: { ...emptyTeamUsage(), gpus: { h100: 8 } } }],
    };
    const plan = scaleUp(snapshot, [h100], [{ pool: 'h100', counted: 1, starting: 0, startedThisInterval: 0 }]);
    expect(plan.starts).toEqual([]);
    expect(plan.waiting).toHaveLength(1);
    expect(plan.waiting[0]!.kind).toBe('quota');
    expect(plan.waiting[0]!.reason).toMatch(/^its team's quota stops it, whatever machines start: team vision/);
  });

  it('a template that cannot fit a stage starts nothing, with the reason', () => {
    const queue = [stage('big', { gpus: 16 }), stage('a100', { gpus: 1, types: ['a100'] }), stage('eu', { gpus: 1, region: 'eu' })];
    const plan = scaleUp({ machines: [], queue }, [h100]);
    expect(plan.starts).toEqual([]);
    expect(kinds(plan)).toEqual({ big: 'too-big', a100: 'gpu-type', eu: 'region' });
    const why = Object.fromEntries(plan.waiting.map((w) => [w.stageId, w.reason]));
    expect(why.big).toBe('too big for any template: it needs 16 h100 GPUs, 4 CPU, 16Gi; the nearest, h100, is 8 × h100, 32 CPU, 256Gi');
    expect(why.a100).toBe('no template has a100 GPUs');
    expect(why.eu).toBe('no template serves region eu');
  });

  it('keeps the fewest machines, then the least idle: one 1-GPU stage takes the 1-GPU template, eight take one 8-GPU machine', () => {
    const big = pool('big', { gpus: 8, type: 'g2' });
    const small = pool('small', { gpus: 1, type: 'a10', cpu: 8, memGi: 64 });
    expect(count(scaleUp({ machines: [], queue: many(1, 's', { gpus: 1, types: [] }) }, [big, small]))).toEqual({ small: 1 });
    expect(count(scaleUp({ machines: [], queue: many(8, 's', { gpus: 1, types: [] }) }, [big, small]))).toEqual({ big: 1 });
  });

  it('CPU stages start CPU machines, GPU stages GPU machines, in one decision each', () => {
    const cpu = pool('cpu', { cpu: 16, memGi: 64 });
    const plan = scaleUp({ machines: [], queue: [...many(6, 'c', { cpu: 8, memGi: 8 }), ...many(2, 'g', { gpus: 4 })] }, [cpu, h100]);
    expect(count(plan)).toEqual({ cpu: 3, h100: 1 });
    expect(plan.starts.find((s) => s.pool === 'cpu')!.reason).toBe('6 stages of team default wait for 8 CPU, 8Gi: starting 3 machines of template cpu');
  });

  it('keeps spare machines ahead of demand: idle ones and starting ones no stage takes count, never above max', () => {
    const spare = pool('h100', { gpus: 8, spare: 2, max: 3 });
    // Nothing waits, one idle machine up: one more starts.
    const idle = templateMachine(spare.template, 'up-1');
    expect(scaleUp({ machines: [idle], queue: [] }, [spare], [{ pool: 'h100', counted: 1, starting: 0, startedThisInterval: 0, idle: 1 }]).starts).toEqual([
      { pool: 'h100', count: 1, stageIds: [], reason: 'pool h100 keeps 2 machines spare, has 1: starting 1 machine of template h100' },
    ]);
    // One starting, taken by a waiting stage: it is not spare; demand first, then the spares, within max 3.
    const plan = scaleUp({ machines: [], queue: many(2, 's', { gpus: 8 }) }, [spare], [{ pool: 'h100', counted: 1, starting: 1, startedThisInterval: 0 }]);
    expect(plan.starts.map((s) => [s.count, s.reason])).toEqual([
      [1, '1 stage of team default waits for 8 h100 GPUs: starting 1 machine of template h100'],
      [1, 'pool h100 keeps 2 machines spare, has 0: starting 1 machine of template h100'],
    ]);
  });

  it('names each team and ask it starts for, most stages first', () => {
    const plan = scaleUp({ machines: [], queue: [...many(2, 'v', { gpus: 8, team: 'vision' }), stage('n', { gpus: 4, team: 'nlp' })] }, [h100]);
    expect(plan.starts).toHaveLength(1);
    expect(plan.starts[0]!.reason).toBe(
      '2 stages of team vision wait for 8 h100 GPUs; 1 stage of team nlp waits for 4 h100 GPUs: starting 3 machines of template h100',
    );
  });

  it('starts up to min with no demand, and those count as supply', () => {
    const warm = pool('h100', { gpus: 8, min: 2 });
    const plan = scaleUp({ machines: [], queue: many(2, 's', { gpus: 8 }) }, [warm]);
    expect(plan.starts).toEqual([
      {
        pool: 'h100',
        count: 2,
        stageIds: [],
        // The waiting stages the pass put on them: held there when they join.
        machineStages: [['s0'], ['s1']],
        reason: 'pool h100 has 0 machines, below its min 2: starting 2 machines of template h100',
      },
    ]);
    expect(plan.waiting.map((w) => [w.kind, w.startingOn])).toEqual([
      ['starting', undefined],
      ['starting', undefined],
    ]);
  });

  it('a stage that fits a machine there now, and one preempted for, start nothing', () => {
    const m = templateMachine(h100.template, 'up-1');
    const snapshot: SchedulerSnapshot = { machines: [m], queue: [stage('a', { gpus: 8 })] };
    // A plan from before the machine was there: the stage waited.
    const plan = planScaleUp({
      snapshot,
      plan: { placements: [], pending: [{ stageId: 'a', reason: 'no machines registered', unplaceable: true }], preemptions: [] },
      pools: [h100],
      state: [],
      now: NOW,
    });
    expect(plan.starts).toEqual([]);
    expect(kinds(plan)).toEqual({ a: 'fits-now' });
    const preempted = planScaleUp({
      snapshot: { machines: [busyMachine(h100, 'up-1')], queue: [stage('a', { gpus: 8 })] },
      plan: {
        placements: [],
        pending: [{ stageId: 'a', reason: 'busy', unplaceable: false }],
        preemptions: [{ stageId: 'a', machineId: 'up-1', victims: [], reason: 'x' }],
      },
      pools: [h100],
      state: [],
      now: NOW,
    });
    expect(preempted.starts).toEqual([]);
    expect(kinds(preempted)).toEqual({ a: 'preempting' });
  });

  it('only the waiting stages count: what the pass placed starts nothing', () => {
    const m = templateMachine(h100.template, 'up-1');
    const plan = scaleUp({ machines: [m], queue: many(2, 's', { gpus: 8 }) }, [h100], [{ pool: 'h100', counted: 1, starting: 0, startedThisInterval: 0 }]);
    expect(plan.starts).toEqual([
      {
        pool: 'h100',
        count: 1,
        stageIds: ['s1'],
        machineStages: [['s1']],
        reason: '1 stage of team default waits for 8 h100 GPUs: starting 1 machine of template h100',
      },
    ]);
  });

  describe('gangs (issue 31)', () => {
    it('a gang of 3 × 8 h100 on an 8-GPU template of max 4 starts 3 machines, each held for it', () => {
      const plan = scaleUp({ machines: [], queue: [gang('g', 3, 8, { team: 'vision' })] }, [pool('h100', { gpus: 8, max: 4 })]);
      expect(plan.starts).toEqual([
        {
          pool: 'h100',
          count: 3,
          stageIds: ['g'],
          machineStages: [['g'], ['g'], ['g']],
          reason: '1 stage of team vision waits for 3 machines × 8 h100 GPUs: starting 3 machines of template h100',
        },
      ]);
      expect(plan.waiting).toEqual([]);
    });

    it('with max 2 it starts none: the pool has room for 2 of its 3 members, and says so', () => {
      const plan = scaleUp({ machines: [], queue: [gang('g', 3, 8)] }, [pool('h100', { gpus: 8, max: 2 })]);
      expect(plan.starts).toEqual([]);
      expect(plan.waiting).toEqual([
        { stageId: 'g', kind: 'at-max', pool: 'h100', reason: 'template h100 may start 2 machines more before its max of 2: its gang needs 3' },
      ]);
      // At max outright (two up, busy): the pool's max is why, as for any stage.
      const full = pool('h100', { gpus: 8, max: 2 });
      const atMax = scaleUp(
        { machines: [busyMachine(full, 'up-1'), busyMachine(full, 'up-2')], queue: [gang('g', 3, 8)] },
        [full],
        [{ pool: 'h100', counted: 2, starting: 0, startedThisInterval: 0 }],
      );
      expect(atMax.starts).toEqual([]);
      expect(atMax.waiting.map((w) => [w.kind, w.reason])).toEqual([['at-max', 'template h100 is at its max of 2 machines (2 up or starting)']]);
    });

    it('a gang takes machines up now first: one idle machine and 2 new for a gang of 3', () => {
      const h100 = pool('h100', { gpus: 8 });
      const plan = scaleUp(
        { machines: [templateMachine(h100.template, 'up-1')], queue: [gang('g', 3, 8)] },
        [h100],
        [{ pool: 'h100', counted: 1, starting: 0, startedThisInterval: 0 }],
      );
      expect(plan.starts).toMatchObject([{ pool: 'h100', count: 2, stageIds: ['g'], machineStages: [['g'], ['g']] }]);
    });

    it('two gangs: the cap per decision counts members; the gang it leaves short waits for the next decision', () => {
      const h100 = pool('h100', { gpus: 8 });
      const queue = [gang('a', 3, 8, { priority: 90 }), gang('b', 3, 8)];
      expect(scaleUp({ machines: [], queue }, [h100], [], 6).starts).toMatchObject([{ count: 6, stageIds: ['a', 'b'] }]);
      const capped = scaleUp({ machines: [], queue }, [h100], [], 4);
      expect(capped.starts).toMatchObject([{ count: 3, stageIds: ['a'], machineStages: [['a'], ['a'], ['a']] }]);
      expect(capped.waiting).toEqual([
        {
          stageId: 'b',
          kind: 'decision-limit',
          reason: 'this decision may start 1 machine more (of 4), its gang needs 3: the next interval looks at it again',
        },
      ]);
    });

    it('a gang held on starting machines waits for them (each named, to be held), and starts nothing more', () => {
      const plan = scaleUp(
        { machines: [], queue: [gang('g', 2, 8)] },
        [pool('h100', { gpus: 8 })],
        [{ pool: 'h100', counted: 2, starting: 2, startedThisInterval: 2, startingFor: [['g'], ['g']] }],
      );
      expect(plan.starts).toEqual([]);
      expect(plan.waiting).toEqual([
        {
          stageId: 'g',
          kind: 'starting',
          pool: 'h100',
          reason: '2 machines of template h100 are starting for its gang, up to 600 s',
          startingOn: [
            { pool: 'h100', index: 0 },
            { pool: 'h100', index: 1 },
          ],
        },
      ]);
    });

    it('its hold keeps the starting machines from a later stage of a higher priority, which gets a machine of its own', () => {
      const hi = { ...stage('hi', { gpus: 8 }), priority: 90, readySince: 5000 };
      const plan = scaleUp(
        { machines: [], queue: [gang('g', 2, 8), hi] },
        [pool('h100', { gpus: 8 })],
        [{ pool: 'h100', counted: 2, starting: 2, startedThisInterval: 2, startingFor: [['g'], ['g']] }],
      );
      expect(plan.starts).toMatchObject([{ count: 1, stageIds: ['hi'] }]);
      expect(plan.waiting.map((w) => [w.stageId, w.kind])).toEqual([['g', 'starting']]);
    });

    it("a gang its team's quota stops whole starts nothing, though each member would fit it", () => {
      const snapshot: SchedulerSnapshot = {
        machines: [],
        queue: [gang('g', 3, 8, { team: 'vision' })],
        teams: [{ name: 'vision', weight: 1, quota: { gpus: { h100: 16 } }, usage: emptyTeamUsage() }],
      };
      const plan = scaleUp(snapshot, [pool('h100', { gpus: 8 })]);
      expect(plan.starts).toEqual([]);
      expect(plan.waiting.map((w) => w.kind)).toEqual(['quota']);
    });

    it('a gang whose sameLabel no template carries starts nothing, and says so', () => {
      const g = gang('g', 2, 8);
      const plan = scaleUp({ machines: [], queue: [{ ...g, placement: { ...g.placement, sameLabel: 'rack' } }] }, [pool('h100', { gpus: 8 })]);
      expect(plan.starts).toEqual([]);
      expect(plan.waiting.map((w) => [w.kind, w.reason])).toEqual([
        ['labels', 'its gang wants machines of one rack (placement.sameLabel): no template carries that label'],
      ]);
    });
  });
});
