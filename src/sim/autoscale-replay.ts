/**
 * Issue 30's benchmark as a discrete-event replay: trace pods arrive, the real `planPlacements`
 * places them, they hold what they got for as long as they ran in production, and, with pools,
 * the autoscaler (`planScaleUp`, `planScaleDown`) starts machines of their templates that join
 * after a boot delay, held for the stages they were started for (docs/autoscaling.md, "Held for
 * the stages it was started for"), and drains and releases idle ones. Without pools it is a fixed
 * cluster. A pod's `gpu_milli` below 1000 is a share of one GPU unless `wholeGpus`.
 * Pure: trace time (seconds) drives it, never the clock.
 */
import { MachineLifecycle, STARTING_STATES } from '../autoscale/machine-lifecycle.js';
import { planScaleDown, type AutoscaledMachine } from '../autoscale/plan-scale-down.js';
import { planScaleUp, type PoolState } from '../autoscale/plan-scale-up.js';
import { templateMachine, type PoolTemplate } from '../autoscale/pool-template.js';
import { stageNeed } from '../scheduler/checks.js';
import { allocationProblem, releaseAllocation, takeAllocation } from '../scheduler/placement-fit.js';
import { DEFAULT_MAX_PLACEMENTS, planPlacements } from '../scheduler/plan-placements.js';
import { gpuMilliTotalOf } from '../domain/resources.js';
import type { MachineView, PlannedPlacement, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';
import type { TracePod } from './alibaba-trace.js';
import { summarise, type SummaryStats } from './trace-replay.js';

export interface AutoscaleReplayOptions {
  /** Machines there from the start and never released (a fixed cluster), with the pool each counts in. */
  fixed?: { machines: readonly MachineView[]; poolOf: ReadonlyMap<string, string> };
  /** Autoscaled pools (none: a fixed cluster). */
  pools?: readonly PoolTemplate[];
  /** From a start until the machine joins, seconds. */
  bootSeconds?: number;
  /** The autoscaler runs every this many seconds (cluster-autoscaler's scan interval is 10 s). */
  intervalSeconds?: number;
  /**
   * Count a pod's `gpu_milli` below 1000 as the whole GPU it asks for, as before issue 29 (default
   * false: such a pod asks for that share of one GPU, `gpu.milli`, as share-replay.ts reads it).
   */
  wholeGpus?: boolean;
}

export interface PoolFigures {
  /** Most machines of the pool holding work at once. */
  peakBusy: number;
  /** Machines holding work, time-weighted mean over [first arrival, last arrival]. */
  meanBusyWhileArriving: number;
  started: number;
}

export interface AutoscaleReplayResult {
  pods: number;
  placed: number;
  /** Pods still queued at the end (no machine or template could ever run them). */
  neverPlaced: number;
  /** Wait (placement − arrival) of pods with GPUs, seconds. */
  gpuWaitSeconds: SummaryStats | null;
  /** GPU-seconds machines were up (fixed: the whole span; started: from the start, boot included, to release). */
  gpuSecondsProvisioned: number;
  /** GPU-seconds held by pods (a share counts its part of the GPU unless `wholeGpus`). */
  gpuSecondsAllocated: number;
  machinesStarted: number;
  /** Autoscaler decisions, with their reasons, in order (starts and scale-down steps). */
  decisions: { time: number; reason: string }[];
  pools: Record<string, PoolFigures>;
  startTime: number;
  lastArrival: number;
  /** When the replay stopped: the last departure, or the last release of an idle autoscaled machine. */
  endTime: number;
}

interface SimMachine {
  view: MachineView;
  pool: string;
  autoscaled: boolean;
  lifecycle: MachineLifecycle;
  startedAt: number;
  joinAt: number;
  releasedAt: number | null;
  idleSince: number | null;
  attempts: number;
  /** The stages it was started for (ScaleUpStart.machineStages): placed there first when it joins. */
  heldFor: string[];
}

interface Departure {
  time: number;
  seq: number;
  placement: PlannedPlacement;
}

/** Departures in (time, seq) order: a sorted insert (the queue holds at most what runs at once). */
function insertDeparture(list: Departure[], d: Departure): void {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const m = list[mid]!;
    if (m.time < d.time || (m.time === d.time && m.seq < d.seq)) lo = mid + 1;
    else hi = mid;
  }
  list.splice(lo, 0, d);
}

/**
 * The stage a trace pod queues as: one GPU with `gpu_milli` below 1000 is a share of it
 * (`resources.gpu.milli`); anything else as the trace loader built it.
 */
export function replayStageOf(pod: TracePod, wholeGpus = false): QueuedStage {
  const gpu = pod.stage.resources.gpu;
  if (wholeGpus || !gpu || gpu.count !== 1 || !(pod.gpuMilli > 0 && pod.gpuMilli < 1000)) return pod.stage;
  return { ...pod.stage, resources: { ...pod.stage.resources, gpu: { ...gpu, milli: pod.gpuMilli } } };
}

export function replayAutoscale(pods: readonly TracePod[], opts: AutoscaleReplayOptions): AutoscaleReplayResult {
  const pools = opts.pools ?? [];
  const boot = opts.bootSeconds ?? 120;
  const interval = opts.intervalSeconds ?? 10;
  const autoscaling = pools.length > 0;
  const arrivals = [...pods].sort((a, b) => a.creationTime - b.creationTime || (a.name < b.name ? -1 : 1));
  const podById = new Map(pods.map((p) => [p.stage.stageId, p]));
  const startTime = arrivals[0]?.creationTime ?? 0;
  const lastArrival = arrivals[arrivals.length - 1]?.creationTime ?? startTime;

  const machines = new Map<string, SimMachine>();
  for (const v of opts.fixed?.machines ?? []) {
    const pool = opts.fixed!.poolOf.get(v.id) ?? 'fixed';
    machines.set(v.id, {
      view: { ...v, gpus: v.gpus.map((g) => ({ ...g })) },
      pool,
      autoscaled: false,
      lifecycle: 'ready',
      startedAt: startTime,
      joinAt: startTime,
      releasedAt: null,
      idleSince: startTime,
      attempts: 0,
      heldFor: [],
    });
  }
  const figures: Record<string, PoolFigures & { busy: number; area: number }> = {};
  const fig = (pool: string) => (figures[pool] ??= { peakBusy: 0, meanBusyWhileArriving: 0, started: 0, busy: 0, area: 0 });
  for (const m of machines.values()) fig(m.pool);
  for (const p of pools) fig(p.name);

  const queue = new Map<string, QueuedStage>();
  const departures: Departure[] = [];
  const joins: SimMachine[] = [];
  const waits: number[] = [];
  const decisions: { time: number; reason: string }[] = [];
  let placed = 0;
  let allocated = 0;
  let seq = 0;
  let ai = 0;
  let started = 0;
  let nextTick = autoscaling ? startTime : Infinity;
  let lastTime = startTime;
  let lastWork = startTime;
  const live = () => [...machines.values()].filter((m) => m.lifecycle === 'ready' || m.lifecycle === 'draining').map((m) => m.view);

  const setBusy = (m: SimMachine, delta: number, now: number) => {
    const before = m.attempts > 0;
    m.attempts += delta;
    const after = m.attempts > 0;
    if (before !== after) {
      const f = fig(m.pool);
      f.busy += after ? 1 : -1;
      f.peakBusy = Math.max(f.peakBusy, f.busy);
    }
    m.idleSince = after ? null : now;
  };

  /** A pass of the real planner over `on` (default every live machine) for `stages` (default the queue). */
  const pass = (now: number, on?: MachineView[], stages?: () => QueuedStage[]) => {
    while (queue.size > 0) {
      const plan = planPlacements({ machines: on ?? live(), queue: stages ? stages() : [...queue.values()] });
      if (plan.placements.length === 0) break;
      for (const p of plan.placements) {
        const m = machines.get(p.machineId)!;
        const stage = queue.get(p.stageId)!;
        const problem = allocationProblem(m.view, p, stageNeed(stage));
        if (problem) throw new Error(`autoscale replay: ${p.stageId} on ${p.machineId}: ${problem}`);
        takeAllocation(m.view, p);
        setBusy(m, 1, now);
        queue.delete(p.stageId);
        const pod = podById.get(p.stageId)!;
        placed += 1;
        allocated += (gpuMilliTotalOf(stage.resources) / 1000) * pod.holdSeconds;
        if (pod.stage.resources.gpu) waits.push(now - pod.creationTime);
        insertDeparture(departures, { time: now + pod.holdSeconds, seq: seq++, placement: p });
      }
      if (plan.placements.length < DEFAULT_MAX_PLACEMENTS) break;
    }
  };

  const autoscale = (now: number): boolean => {
    const all = [...machines.values()].filter((m) => m.autoscaled);
    const snapshot: SchedulerSnapshot = { machines: live(), queue: [...queue.values()], now: now * 1000 };
    const plan = queue.size > 0 ? planPlacements(snapshot) : { placements: [], pending: [] };
    const down = planScaleDown({
      machines: all.map((m): AutoscaledMachine => ({
        id: m.view.id,
        name: m.view.name,
        pool: m.pool,
        lifecycle: m.lifecycle,
        startedAt: m.startedAt * 1000,
        idleSince: m.idleSince === null ? null : m.idleSince * 1000,
        attempts: m.attempts,
      })),
      pools,
      plan,
      now: now * 1000,
    });
    for (const s of down) {
      const m = machines.get(s.machineId)!;
      m.lifecycle = s.to;
      m.view.scheduling = s.to === 'draining' ? 'draining' : 'eligible';
      if (s.to === 'released') {
        // The property the issue asks for: a scale-down never ends a running stage.
        if (m.attempts > 0) throw new Error(`autoscale replay: ${m.view.name} released with ${m.attempts} attempts on it`);
        m.releasedAt = now;
      }
      decisions.push({ time: now, reason: s.reason });
    }
    let startedNow = 0;
    // Demand, or a pool that keeps spare machines (which may start with nothing waiting).
    if (plan.pending.length > 0 || pools.some((p) => p.autoscale.spareMachines > 0)) {
      const startingOf = new Map<string, SimMachine[]>();
      const state: PoolState[] = pools.map((p) => {
        const mine = all.filter((m) => m.pool === p.name);
        startingOf.set(
          p.name,
          mine.filter((m) => STARTING_STATES.has(m.lifecycle)),
        );
        return {
          pool: p.name,
          counted: mine.filter((m) => m.lifecycle === 'provisioning' || m.lifecycle === 'joining' || m.lifecycle === 'ready').length,
          starting: mine.filter((m) => STARTING_STATES.has(m.lifecycle)).length,
          startingFor: startingOf.get(p.name)!.map((m) => m.heldFor),
          startedThisInterval: 0,
          idle: mine.filter((m) => m.lifecycle === 'ready' && m.attempts === 0).length,
        };
      });
      const up = planScaleUp({ snapshot, plan, pools, state, now: now * 1000 });
      // A stage the simulation counted onto a starting machine's room keeps it: held there too.
      for (const w of up.waiting)
        for (const on of w.startingOn ?? []) {
          const m = startingOf.get(on.pool)?.[on.index];
          if (m && !m.heldFor.includes(w.stageId)) m.heldFor.push(w.stageId);
        }
      for (const s of up.starts) {
        const pool = pools.find((p) => p.name === s.pool)!;
        for (let i = 0; i < s.count; i++) {
          started += 1;
          fig(pool.name).started += 1;
          const id = `${pool.name}-as-${started}`;
          const m: SimMachine = {
            view: templateMachine(pool.template, id),
            pool: pool.name,
            autoscaled: true,
            lifecycle: 'provisioning',
            startedAt: now,
            joinAt: now + boot,
            releasedAt: null,
            idleSince: null,
            attempts: 0,
            heldFor: s.machineStages?.[i] ?? [],
          };
          machines.set(id, m);
          joins.push(m);
        }
        startedNow += s.count;
        decisions.push({ time: now, reason: s.reason });
      }
    }
    return down.length > 0 || startedNow > 0;
  };

  for (;;) {
    const nextArrival = arrivals[ai]?.creationTime ?? Infinity;
    const nextDeparture = departures[0]?.time ?? Infinity;
    const nextJoin = joins[0]?.joinAt ?? Infinity;
    const workLeft = nextArrival !== Infinity || nextDeparture !== Infinity || nextJoin !== Infinity;
    const now = Math.min(nextArrival, nextDeparture, nextJoin, nextTick);
    if (now === Infinity) break;
    const until = Math.min(now, lastArrival);
    if (until > lastTime) for (const f of Object.values(figures)) f.area += f.busy * (until - lastTime);
    lastTime = Math.max(lastTime, now);

    while (departures.length > 0 && departures[0]!.time <= now) {
      const d = departures.shift()!;
      const m = machines.get(d.placement.machineId)!;
      releaseAllocation(m.view, d.placement);
      setBusy(m, -1, now);
      lastWork = now;
    }
    while (joins.length > 0 && joins[0]!.joinAt <= now) {
      const m = joins.shift()!;
      m.lifecycle = 'ready';
      m.idleSince = now;
      // Held for the stages it was started for: they go there before the pass gives it to any other
      // (a stage that came later, of a higher priority, would otherwise take it, and the one it was
      // started for wait for another boot). Those placed elsewhere meanwhile hold nothing.
      const held = m.heldFor.filter((id) => queue.has(id));
      m.heldFor = [];
      if (held.length > 0) pass(now, [m.view], () => held.filter((id) => queue.has(id)).map((id) => queue.get(id)!));
    }
    while (ai < arrivals.length && arrivals[ai]!.creationTime <= now) {
      const pod = arrivals[ai++]!;
      queue.set(pod.stage.stageId, replayStageOf(pod, opts.wholeGpus));
    }
    pass(now);
    if (now === nextTick) {
      const acted = autoscale(now);
      nextTick += interval;
      // Nothing left to arrive, run or join, and the autoscaler had nothing to do with every idle
      // machine past its idle time: what remains stays (min) or never fits.
      const waitingOnIdle = [...machines.values()].some(
        (m) =>
          m.autoscaled &&
          (m.lifecycle === 'ready' || m.lifecycle === 'draining') &&
          m.idleSince !== null &&
          now - m.idleSince <= (pools.find((p) => p.name === m.pool)?.autoscale.idleSeconds ?? 0),
      );
      if (!workLeft && !acted && !waitingOnIdle) nextTick = Infinity;
    }
  }

  const endTime = Math.max(lastTime, lastWork);
  let provisioned = 0;
  for (const m of machines.values()) provisioned += m.view.gpus.length * ((m.releasedAt ?? endTime) - m.startedAt);
  const span = lastArrival - startTime;
  const poolsOut: Record<string, PoolFigures> = {};
  for (const [name, f] of Object.entries(figures))
    poolsOut[name] = { peakBusy: f.peakBusy, meanBusyWhileArriving: span > 0 ? f.area / span : f.busy, started: f.started };
  return {
    pods: pods.length,
    placed,
    neverPlaced: queue.size,
    gpuWaitSeconds: summarise(waits),
    gpuSecondsProvisioned: provisioned,
    gpuSecondsAllocated: allocated,
    machinesStarted: started,
    decisions,
    pools: poolsOut,
    startTime,
    lastArrival,
    endTime,
  };
}

/** The pods created on day `day` of the trace (seconds [day·86400, (day+1)·86400)). */
export function podsOfDay(pods: readonly TracePod[], day: number): TracePod[] {
  return pods.filter((p) => Math.floor(p.creationTime / 86400) === day);
}

/** The day with the most pods asking for GPUs (ties: the earlier day). */
export function busiestDay(pods: readonly TracePod[]): number {
  const n = new Map<number, number>();
  for (const p of pods) if (p.stage.resources.gpu) n.set(Math.floor(p.creationTime / 86400), (n.get(Math.floor(p.creationTime / 86400)) ?? 0) + 1);
  return [...n].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0]?.[0] ?? 0;
}
