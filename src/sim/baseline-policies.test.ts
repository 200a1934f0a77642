import { describe, expect, it } from 'vitest';
import { stageNeed } from '../scheduler/checks.js';
import { allocationProblem, takeAllocation } from '../scheduler/placement-fit.js';
import { planPlacements } from '../scheduler/plan-placements.js';
import type { MachineView, Plan, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';
import { defaultAlibabaTraceDir, hasAlibabaTrace, parseNodeList, parsePodList, readNodeList, readPodList, type TracePod } from './alibaba-trace.js';
import { planBestFit, planFifo } from './baseline-policies.js';
import { policyFigures, TRACE_POLICIES } from './policy-figures.js';
import { replayTrace, withArrivalSpeedup, type Planner } from './trace-replay.js';

const POD_HEADER = 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time';
const pods = (...rows: string[]) => parsePodList([POD_HEADER, ...rows].join('\n'));

/** A node-list row as a machine with `gpus` t4 GPUs, of which the first `busy` are taken (with no CPU or memory). */
function machine(name: string, gpus: number, { cpu = 8000, busy = 0 } = {}): MachineView {
  const m = parseNodeList(`sn,cpu_milli,memory_mib,gpu,model\n${name},${cpu},1024,${gpus},${gpus > 0 ? 'T4' : ''}`)[0]!;
  for (const g of m.gpus) g.free = g.index >= busy;
  return m;
}

/** A queued stage as the trace gives it: name, GPUs, arrival (s), QoS. */
function stage(name: string, gpus: number, arrival: number, qos = 'BE', cpu = 1000): QueuedStage {
  return pods(`${name},${cpu},1,${gpus},${gpus > 0 ? 1000 : 0},,${qos},Running,${arrival},${arrival + 10},${arrival}`)[0]!.stage;
}

const snap = (machines: MachineView[], queue: QueuedStage[]): SchedulerSnapshot => ({ machines, queue });
const where = (plan: Plan) => plan.placements.map((p) => [p.stageId, p.machineId, p.gpuIndices]);

describe('planFifo', () => {
  it('blocks behind a head that does not fit now: nothing after it is placed, though it would fit', () => {
    const s = snap([machine('m', 2, { busy: 1 })], [stage('head', 2, 0), stage('small', 1, 1)]);
    const fifo = planFifo(s);
    expect(fifo.placements).toEqual([]);
    expect(fifo.pending).toEqual([
      { stageId: 'head', reason: 'no machine with 2 free GPUs: 1 of 1 matching machine busy', unplaceable: false },
      { stageId: 'small', reason: 'waits behind head, the oldest stage, which does not fit now (FIFO)', unplaceable: false },
    ]);
    // Best fit skips the head and places what fits.
    expect(where(planBestFit(s))).toEqual([['small', 'm', [1]]]);
  });

  it('does not block behind a stage no machine could ever run', () => {
    const s = snap([machine('m', 2)], [stage('huge', 8, 0), stage('small', 1, 1)]);
    const fifo = planFifo(s);
    expect(where(fifo)).toEqual([['small', 'm', [0]]]);
    expect(fifo.pending).toEqual([{ stageId: 'huge', reason: 'no ready machine can run it: 1 lacks 8 GPUs', unplaceable: true }]);
  });

  it('takes stages in arrival order whatever their QoS, each on the first machine by name that fits', () => {
    const machines = [machine('b', 1), machine('a', 4, { busy: 3 })];
    const queue = [stage('late-ls', 1, 5, 'LS'), stage('early-be', 1, 0, 'BE'), stage('next-be', 1, 1, 'BE')];
    expect(where(planFifo(snap(machines, queue)))).toEqual([
      ['early-be', 'a', [3]],
      ['next-be', 'b', [0]],
    ]);
    // Gantry: priority first.
    expect(planPlacements(snap(machines, queue)).placements[0]?.stageId).toBe('late-ls');
  });

  it('honours maxPlacements', () => {
    const queue = [stage('a', 0, 0), stage('b', 0, 1), stage('c', 0, 2)];
    expect(where(planFifo(snap([machine('m', 0)], queue), { maxPlacements: 2 }))).toEqual([
      ['a', 'm', []],
      ['b', 'm', []],
    ]);
  });
});

describe('planBestFit', () => {
  it('chooses the machine that leaves the fewest GPUs, then the least CPU', () => {
    const machines = [machine('a', 4), machine('b', 4, { busy: 1 }), machine('c', 2, { cpu: 16000 }), machine('d', 2, { cpu: 4000 })];
    expect(where(planBestFit(snap(machines, [stage('two', 2, 0)])))).toEqual([['two', 'd', [0, 1]]]);
    expect(where(planBestFit(snap(machines.slice(0, 2), [stage('two', 2, 0)])))).toEqual([['two', 'b', [1, 2]]]);
  });

  it('ignores QoS: arrival order', () => {
    const queue = [stage('late-ls', 1, 5, 'LS'), stage('early-be', 1, 0, 'BE')];
    expect(where(planBestFit(snap([machine('m', 1)], queue)))).toEqual([['early-be', 'm', [0]]]);
  });

  it('holds no machine for a waiting multi-GPU stage (Gantry does)', () => {
    const s = snap([machine('m', 4, { busy: 3 })], [stage('big', 2, 0, 'LS'), stage('small', 1, 1)]);
    expect(where(planBestFit(s))).toEqual([['small', 'm', [3]]]);
    expect(planPlacements(s)).toMatchObject({ placements: [], reservations: [{ stageId: 'big', machineId: 'm' }] });
  });
});

describe('baselines and the GPU-machine CPU reserve', () => {
  it('both baselines put CPU work on a GPU machine; Gantry keeps its CPUs for GPU work', () => {
    const s = snap([machine('g', 1)], [stage('cpu', 0, 0)]);
    expect(where(planFifo(s))).toEqual([['cpu', 'g', []]]);
    expect(where(planBestFit(s))).toEqual([['cpu', 'g', []]]);
    expect(planPlacements(s).placements).toEqual([]);
  });
});

describe('replayTrace with a planner', () => {
  it('calls the given planner, with the replay options', () => {
    const seen: number[] = [];
    const never: Planner = (snapshot, opts) => {
      seen.push(opts.maxPlacements ?? -1);
      return { placements: [], pending: snapshot.queue.map((q) => ({ stageId: q.stageId, reason: 'no', unplaceable: false })) };
    };
    const r = replayTrace([machine('m', 1)], pods('a,1000,1,1,1000,,BE,Running,0,10,0'), { planner: never, planOptions: { maxPlacements: 7 } });
    expect(seen).toEqual([7]);
    expect(r.stats).toMatchObject({ placed: 0, neverPlaced: 1 });
    expect(r.neverPlaced).toEqual([{ stageId: 'a', reason: 'no', unplaceable: false }]);
  });

  it('FIFO makes the pod behind a blocked head wait; best fit does not', () => {
    // m has 2 GPUs; hog holds one 0..100; big (2 GPUs) arrives at 1, small (1 GPU) at 2.
    const ps = pods('hog,1000,1,1,1000,,BE,Running,0,100,0', 'big,1000,1,2,1000,,BE,Running,1,11,1', 'small,1000,1,1,1000,,BE,Running,2,7,2');
    const at = (planner: Planner) => replayTrace([machine('m', 2)], ps, { planner }).placements.map((p) => [p.stageId, p.placedAt]);
    expect(at(planFifo)).toEqual([
      ['hog', 0],
      ['big', 100],
      ['small', 110],
    ]);
    expect(at(planBestFit)).toEqual([
      ['hog', 0],
      ['small', 2],
      ['big', 100],
    ]);
  });
});

describe('policyFigures', () => {
  it('GPU allocation ratio over [first arrival, last placement], waits of GPU and high-priority GPU pods', () => {
    // One GPU. a (BE) holds it 0..10; b (LS) arrives at 0, placed at 10; c is CPU work.
    const ps = pods('a,1000,1,1,1000,,BE,Running,0,10,0', 'b,1000,1,1,1000,,LS,Running,0,30,0', 'c,1000,1,0,0,,LS,Running,4,5,4');
    const r = replayTrace([machine('m', 1), machine('n', 0)], ps, { planner: planFifo });
    const f = policyFigures(r, ps);
    expect(f).toMatchObject({ pods: 3, placed: 3, neverPlaced: 0, gpuPods: 2, gpuNeverPlaced: 0, highPriorityGpuPods: 1, busySpan: { start: 0, end: 10 } });
    expect(f.gpuAllocationRatio).toBe(1);
    expect(f.gpuWaitSeconds).toMatchObject({ mean: 5, p99: 10, max: 10 });
    expect(f.highPriorityGpuWaitSeconds).toMatchObject({ mean: 10, p99: 10 });
  });
});

// ---------------------------------------------------------------- a slice of the real trace

const TRACE_DIR = defaultAlibabaTraceDir();
const HAVE_TRACE = hasAlibabaTrace(TRACE_DIR);
const SLICE = 1000;
const title = HAVE_TRACE
  ? `every policy on the first ${SLICE} alibaba-gpu-2023 pods, ×10,000 on an eighth of the cluster (contended)`
  : `every policy on a slice of alibaba-gpu-2023: SKIPPED, trace not found at ${TRACE_DIR} (expected ../shared/traces/alibaba-gpu-2023 beside the repo)`;
if (!HAVE_TRACE) console.warn(`[baseline-policies.test] ${title}`);

/**
 * Per pass: free room within [0, total] on every machine, the plan fits the state it was planned on
 * (applied in order on a copy, through the one fit rule), and every queued stage is reported once.
 * Plain throws, not expect(): it runs on every pass and must stay cheap.
 */
function checkPass(snapshot: SchedulerSnapshot, plan: Plan): void {
  const copy = new Map(snapshot.machines.map((m) => [m.id, { ...m, gpus: m.gpus.map((g) => ({ ...g })) }]));
  const stages = new Map(snapshot.queue.map((s) => [s.stageId, s]));
  for (const m of snapshot.machines) {
    if (m.cpuMillisFree < 0 || m.cpuMillisFree > m.cpuMillisTotal || m.memoryBytesFree < 0 || m.memoryBytesFree > m.memoryBytesTotal) {
      throw new Error(`${m.id}: free room out of range`);
    }
  }
  for (const p of plan.placements) {
    const m = copy.get(p.machineId);
    const s = stages.get(p.stageId);
    if (m === undefined || s === undefined) throw new Error(`${p.stageId} on ${p.machineId}: unknown stage or machine`);
    const problem = allocationProblem(m, p, stageNeed(s));
    if (problem !== null) throw new Error(`${p.stageId} on ${p.machineId}: ${problem}`);
    takeAllocation(m, p);
  }
  const reported = new Set([...plan.placements, ...plan.pending].map((p) => p.stageId));
  if (reported.size !== plan.placements.length + plan.pending.length) throw new Error('a stage reported twice');
  if (plan.placements.length < 1000 && reported.size !== snapshot.queue.length) throw new Error('a queued stage not reported');
}

describe.skipIf(!HAVE_TRACE)(title, () => {
  const machines = HAVE_TRACE ? readNodeList(TRACE_DIR).filter((_, i) => i % 8 === 0) : [];
  const slice: TracePod[] = HAVE_TRACE ? withArrivalSpeedup(readPodList('default', TRACE_DIR).slice(0, SLICE), 10_000) : [];

  for (const [name, { planner }] of Object.entries(TRACE_POLICIES)) {
    it(`${name}: no over-allocation at any pass, placed + never placed = pods`, () => {
      const r = replayTrace(machines, slice, { planner, onPass: ({ snapshot, plan }) => checkPass(snapshot, plan) });
      const placed = new Set(r.placements.map((p) => p.stageId));
      expect(placed.size).toBe(r.placements.length);
      for (const p of r.neverPlaced) expect(placed.has(p.stageId)).toBe(false);
      expect(r.stats.placed + r.stats.neverPlaced).toBe(SLICE);
      const f = policyFigures(r, slice);
      expect(f.placed + f.neverPlaced).toBe(f.pods);
      expect(f.gpuAllocationRatio).toBeGreaterThan(0);
      expect(f.gpuAllocationRatio).toBeLessThanOrEqual(1);
      // Contended: some GPU pod waited.
      expect(f.gpuWaitSeconds?.max ?? 0).toBeGreaterThan(0);
      expect(r.utilisation[r.utilisation.length - 1]?.allocatedGpus).toBe(0);
    });
  }
});
