/**
 * A small discrete-event replay of a trace through a pure planner (by default the real
 * `planPlacements`): pods arrive at their creation time, hold what they were given for as long as
 * they ran in production, and leave. Pure: trace time (seconds) drives it, it never reads the
 * clock. The seed of the simulator.
 */
import { stageNeed } from '../scheduler/checks.js';
import { allocationProblem, releaseAllocation, takeAllocation } from '../scheduler/placement-fit.js';
import { DEFAULT_MAX_PLACEMENTS, planPlacements, type PlanOptions } from '../scheduler/plan-placements.js';
import { placementMembers } from '../scheduler/placement-members.js';
import { RecentWorkload } from '../scheduler/recent-workload.js';
import type { MachineView, PendingStage, Plan, PlannedPlacement, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';
import type { TracePod } from './alibaba-trace.js';
import { errorText } from '../lib/error-text.js';

/**
 * The same pods arriving `speedup` times faster: each pod's trace times shift so that it is created
 * at creation_time / speedup, and it keeps its hold time. The openb pod list is a sample spread over
 * ~149 days, so replayed at trace speed it never fills the cluster (about 1% of GPUs at the peak);
 * a speedup is the load knob for contention. Order of arrival is unchanged. Pure.
 */
export function withArrivalSpeedup(pods: readonly TracePod[], speedup: number): TracePod[] {
  if (!(speedup > 0) || !Number.isFinite(speedup)) throw new Error(`speedup must be a positive number, got ${speedup}`);
  return pods.map((p) => {
    const arrival = p.creationTime / speedup;
    const shift = arrival - p.creationTime;
    return {
      ...p,
      creationTime: arrival,
      deletionTime: p.deletionTime + shift,
      scheduledTime: p.scheduledTime === null ? null : p.scheduledTime + shift,
      stage: { ...p.stage, readySince: arrival * 1000 },
    };
  });
}

export interface ReplayPass {
  /** Trace time of the pass, seconds. */
  time: number;
  /**
   * What the scheduler saw. Its machines are the replay's live state: read them during the call
   * only; the replay applies the plan to them right after.
   */
  snapshot: SchedulerSnapshot;
  plan: Plan;
}

/** One scheduling pass, pure: `planPlacements`, or a baseline policy (`baseline-policies.ts`) to compare it with. */
export type Planner = (snapshot: SchedulerSnapshot, opts: PlanOptions) => Plan;

/**
 * `planPlacements` as the server runs it: FGD's target workload from the GPU stages earlier passes
 * saw (`RecentWorkload`, server/scheduler-pass.ts), unless the options give one. One per replay:
 * it remembers.
 */
export function serverPlanner(limit?: number): Planner {
  const recent = new RecentWorkload(limit);
  return (s, o) => planPlacements(s, o.targetWorkload !== undefined ? o : { ...o, targetWorkload: recent.observe(s) });
}

/**
 * The replay after every event time: what the passes at that time left (their placements applied).
 * Holds (`plan.reservations`) stay as the last pass made them until the next event, when the
 * next pass remakes them; with nothing queued no pass runs and nothing is held.
 */
export interface ReplayStep {
  /** Trace time, seconds. */
  time: number;
  /** The replay's live machines: read them during the call only. */
  machines: readonly MachineView[];
  /** The last pass at this time, or null when none ran (nothing was queued). */
  plan: Plan | null;
}

export interface ReplayOptions {
  /** The policy under test; default Gantry's `planPlacements` as the server runs it (`serverPlanner`). */
  planner?: Planner;
  /** Passed to every planner call. A pass that hits `maxPlacements` is followed by another at the same time. */
  planOptions?: PlanOptions;
  /** Called after each pass, before its plan is applied (to check invariants, record, trace). */
  onPass?: (pass: ReplayPass) => void;
  /** Called once per event time, after its passes' plans were applied (to integrate what holds cost). */
  onStep?: (step: ReplayStep) => void;
}

export interface ReplayPlacement extends PlannedPlacement {
  /** Seconds. */
  placedAt: number;
  releasedAt: number;
  /** placedAt - creation time, seconds. */
  waitSeconds: number;
}

export interface UtilisationPoint {
  /** From this time (seconds) until the next point, this many GPUs were allocated. */
  time: number;
  allocatedGpus: number;
}

export interface SummaryStats {
  mean: number;
  median: number;
  p95: number;
  p99: number;
  max: number;
}

export interface ReplayStats {
  pods: number;
  placed: number;
  neverPlaced: number;
  /** Pods placed in the pass at their own arrival. */
  placedOnArrival: number;
  passes: number;
  /** Wait (placement - creation) over placed pods, seconds; null when nothing was placed. */
  waitSeconds: SummaryStats | null;
  gpuUtilisation: {
    totalGpus: number;
    /** Allocated / total GPUs, time-weighted over [startTime, endTime]. */
    mean: number;
    /**
     * The same over [startTime, lastArrival]: while work still arrives. Differs from `mean` when a
     * few long pods outlive the arrivals (the openb trace has pods that run for 145 days).
     */
    meanWhileArriving: number;
    peak: number;
  };
  /** First arrival, last arrival and last event (seconds). */
  startTime: number;
  lastArrival: number;
  endTime: number;
}

export interface ReplayResult {
  stats: ReplayStats;
  /** In placement order. */
  placements: ReplayPlacement[];
  /** Pods still queued when no event was left, with the reason of the last pass. */
  neverPlaced: PendingStage[];
  /** Allocated GPUs as a step function of time (one point per change). */
  utilisation: UtilisationPoint[];
}

interface Departure {
  time: number;
  seq: number;
  placement: PlannedPlacement;
}

/** A binary min-heap on (time, seq): departures in time order, ties in placement order. */
class DepartureHeap {
  private items: Departure[] = [];
  get size(): number {
    return this.items.length;
  }
  peek(): Departure | undefined {
    return this.items[0];
  }
  private less(a: Departure, b: Departure): boolean {
    return a.time < b.time || (a.time === b.time && a.seq < b.seq);
  }
  push(d: Departure): void {
    const xs = this.items;
    xs.push(d);
    let i = xs.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(xs[i]!, xs[p]!)) break;
      [xs[i], xs[p]] = [xs[p]!, xs[i]!];
      i = p;
    }
  }
  pop(): Departure | undefined {
    const xs = this.items;
    const top = xs[0];
    const last = xs.pop();
    if (xs.length > 0 && last !== undefined) {
      xs[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < xs.length && this.less(xs[l]!, xs[m]!)) m = l;
        if (r < xs.length && this.less(xs[r]!, xs[m]!)) m = r;
        if (m === i) break;
        [xs[i], xs[m]] = [xs[m]!, xs[i]!];
        i = m;
      }
    }
    return top;
  }
}

function cloneMachine(m: MachineView): MachineView {
  return { ...m, labels: { ...m.labels }, gpus: m.gpus.map((g) => ({ ...g })) };
}

/** One member's part of a placement: its machine and devices, each member's CPU and memory (docs/gangs.md, "The plan"). */
const memberPart = (p: PlannedPlacement, m: { machineId: string; gpuIndices: number[] }): PlannedPlacement => ({
  ...p,
  machineId: m.machineId,
  gpuIndices: m.gpuIndices,
  members: undefined,
});

/**
 * Takes a placement on the replay's state, every member of a gang, re-checking each first as the
 * store does on apply; all are checked before any is taken, so a gang is applied whole or not at
 * all. Throws when the plan would over-allocate: that is a scheduler bug, not a simulated outcome.
 */
function allocate(byId: ReadonlyMap<string, MachineView>, p: PlannedPlacement, stage: QueuedStage): void {
  const need = stageNeed(stage);
  const parts = placementMembers(p).map((member) => {
    const m = byId.get(member.machineId);
    if (m === undefined) throw new Error(`replay: placed ${p.stageId} on unknown machine ${member.machineId}`);
    const part = memberPart(p, member);
    const problem = allocationProblem(m, part, need);
    if (problem) throw new Error(`replay: ${p.stageId} on ${m.id}: ${problem}`);
    return { m, part };
  });
  for (const { m, part } of parts) takeAllocation(m, part);
}

function release(byId: ReadonlyMap<string, MachineView>, p: PlannedPlacement): void {
  for (const member of placementMembers(p)) {
    try {
      releaseAllocation(byId.get(member.machineId)!, memberPart(p, member));
    } catch (err) {
      throw new Error(`replay: ${p.stageId} ${errorText(err)}`);
    }
  }
}

/** GPUs a placement takes, every member's. */
const gpusOf = (p: PlannedPlacement) => placementMembers(p).reduce((n, m) => n + m.gpuIndices.length, 0);

/** Mean, median, p95 and p99 (nearest rank) and max; null for no values. */
export function summarise(values: readonly number[]): SummaryStats | null {
  if (values.length === 0) return null;
  const s = [...values].sort((a, b) => a - b);
  const n = s.length;
  const median = n % 2 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
  const rank = (q: number) => s[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))]!;
  return {
    mean: s.reduce((a, b) => a + b, 0) / n,
    median,
    p95: rank(0.95),
    p99: rank(0.99),
    max: s[n - 1]!,
  };
}

/**
 * Time-weighted mean utilisation (allocated / total GPUs) in consecutive buckets of `bucketSeconds`
 * from `start` to `end`, from a step series as `replayTrace` returns it.
 */
export function utilisationBuckets(
  series: readonly UtilisationPoint[],
  totalGpus: number,
  start: number,
  end: number,
  bucketSeconds: number,
): { start: number; mean: number }[] {
  const out: { start: number; mean: number }[] = [];
  if (!(bucketSeconds > 0) || end <= start || totalGpus <= 0) return out;
  let k = 0;
  let level = 0;
  for (let b = start; b < end; b += bucketSeconds) {
    const bEnd = Math.min(end, b + bucketSeconds);
    let area = 0;
    let t = b;
    // Level in force at b: the last point at or before b.
    while (k < series.length && series[k]!.time <= b) level = series[k++]!.allocatedGpus;
    while (k < series.length && series[k]!.time < bEnd) {
      const p = series[k++]!;
      area += level * (p.time - t);
      t = p.time;
      level = p.allocatedGpus;
    }
    area += level * (bEnd - t);
    out.push({ start: b, mean: area / (totalGpus * (bEnd - b)) });
  }
  return out;
}

/**
 * Replays pods in arrival order as a discrete-event loop. At each distinct event time: departures
 * due then release their resources, pods created then join the queue, and, if anything is queued,
 * the planner (`opts.planner`, default `serverPlanner()`) runs on the current state; its placements hold their resources from now until
 * now + `holdSeconds`. Pending pods stay queued until a later pass places them. Placements are
 * re-checked on apply, a gang's every member before any is taken (docs/gangs.md); an
 * over-allocation throws.
 *
 * Starts from the machines as given (copied; busy devices and used CPU stay busy for the whole
 * replay). Pure and deterministic: time comes from the trace only.
 */
export function replayTrace(machines: readonly MachineView[], pods: readonly TracePod[], opts: ReplayOptions = {}): ReplayResult {
  const planner = opts.planner ?? serverPlanner();
  const planOptions = opts.planOptions ?? {};
  const maxPlacements = Math.floor(planOptions.maxPlacements ?? DEFAULT_MAX_PLACEMENTS);
  const state = machines.map(cloneMachine);
  const byId = new Map(state.map((m) => [m.id, m]));
  if (byId.size !== state.length) throw new Error('replay: duplicate machine ids');
  const podById = new Map<string, TracePod>();
  for (const p of pods) {
    if (podById.has(p.stage.stageId)) throw new Error(`replay: duplicate pod ${p.stage.stageId}`);
    podById.set(p.stage.stageId, p);
  }
  const arrivals = [...pods].sort((a, b) => a.creationTime - b.creationTime || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  const totalGpus = state.reduce((n, m) => n + m.gpus.length, 0);
  let allocatedGpus = state.reduce((n, m) => n + m.gpus.filter((g) => !g.free).length, 0);
  let peakGpus = allocatedGpus;
  const queue = new Map<string, QueuedStage>();
  const lastReason = new Map<string, PendingStage>();
  const departures = new DepartureHeap();
  const placements: ReplayPlacement[] = [];
  let placedOnArrival = 0;
  let passes = 0;
  let seq = 0;
  let ai = 0;

  const startTime = arrivals[0]?.creationTime ?? 0;
  const lastArrival = arrivals[arrivals.length - 1]?.creationTime ?? startTime;
  let gpuSecondsWhileArriving = 0;
  let lastTime = startTime;
  let gpuSeconds = 0;

  const utilisation: UtilisationPoint[] = [{ time: startTime, allocatedGpus }];
  /** One point per change of level; several steps at one time keep the last level. */
  const record = (now: number) => {
    const last = utilisation[utilisation.length - 1]!;
    if (last.time === now) {
      last.allocatedGpus = allocatedGpus;
      const prev = utilisation[utilisation.length - 2];
      if (prev !== undefined && prev.allocatedGpus === allocatedGpus) utilisation.pop();
    } else if (last.allocatedGpus !== allocatedGpus) {
      utilisation.push({ time: now, allocatedGpus });
    }
  };

  for (;;) {
    const nextArrival = arrivals[ai]?.creationTime;
    const nextDeparture = departures.peek()?.time;
    if (nextArrival === undefined && nextDeparture === undefined) break;
    const now = Math.min(nextArrival ?? Infinity, nextDeparture ?? Infinity);
    gpuSeconds += allocatedGpus * (now - lastTime);
    if (lastTime < lastArrival) gpuSecondsWhileArriving += allocatedGpus * (Math.min(now, lastArrival) - lastTime);
    lastTime = now;

    while (departures.size > 0 && departures.peek()!.time <= now) {
      const d = departures.pop()!;
      release(byId, d.placement);
      allocatedGpus -= gpusOf(d.placement);
    }
    const arrivedNow = new Set<string>();
    while (ai < arrivals.length && arrivals[ai]!.creationTime <= now) {
      const pod = arrivals[ai++]!;
      queue.set(pod.stage.stageId, pod.stage);
      arrivedNow.add(pod.stage.stageId);
    }

    let lastPlan: Plan | null = null;
    while (queue.size > 0) {
      const snapshot: SchedulerSnapshot = { machines: state, queue: [...queue.values()] };
      const plan = planner(snapshot, planOptions);
      passes += 1;
      opts.onPass?.({ time: now, snapshot, plan });
      lastPlan = plan;
      for (const p of plan.placements) {
        const stage = queue.get(p.stageId);
        const pod = podById.get(p.stageId);
        if (stage === undefined || pod === undefined) throw new Error(`replay: placed ${p.stageId}, which is not queued`);
        allocate(byId, p, stage);
        allocatedGpus += gpusOf(p);
        queue.delete(p.stageId);
        lastReason.delete(p.stageId);
        if (arrivedNow.has(p.stageId)) placedOnArrival += 1;
        const releasedAt = now + pod.holdSeconds;
        departures.push({ time: releasedAt, seq: seq++, placement: p });
        placements.push({ ...p, placedAt: now, releasedAt, waitSeconds: now - pod.creationTime });
      }
      for (const p of plan.pending) lastReason.set(p.stageId, p);
      // A pass stops at maxPlacements without reporting the rest: run another at the same time.
      if (plan.placements.length === 0 || plan.placements.length < maxPlacements) break;
    }
    peakGpus = Math.max(peakGpus, allocatedGpus);
    record(now);
    opts.onStep?.({ time: now, machines: state, plan: lastPlan });
  }

  const endTime = lastTime;
  const neverPlaced: PendingStage[] = [...queue.keys()].map(
    (stageId) => lastReason.get(stageId) ?? { stageId, reason: 'never considered (pass cap reached)', unplaceable: false },
  );
  const span = endTime - startTime;
  const arrivalSpan = lastArrival - startTime;
  return {
    stats: {
      pods: pods.length,
      placed: placements.length,
      neverPlaced: neverPlaced.length,
      placedOnArrival,
      passes,
      waitSeconds: summarise(placements.map((p) => p.waitSeconds)),
      gpuUtilisation: {
        totalGpus,
        mean: totalGpus > 0 && span > 0 ? gpuSeconds / (totalGpus * span) : 0,
        meanWhileArriving: totalGpus > 0 && arrivalSpan > 0 ? gpuSecondsWhileArriving / (totalGpus * arrivalSpan) : 0,
        peak: totalGpus > 0 ? peakGpus / totalGpus : 0,
      },
      startTime,
      lastArrival,
      endTime,
    },
    placements,
    neverPlaced,
    utilisation,
  };
}
