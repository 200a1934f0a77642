/**
 * Issue 31's simulator question: gangs (docs/gangs.md) among the trace's pods, placed by the real
 * `planPlacements` with `gangs: true`, with and without reservations for gangs
 * (`PlanOptions.gangReservations`). The replay is `replayTrace`'s event loop (arrivals, departures,
 * a pass at each event time); this file adds the gang figures: the wait of gangs and of the other
 * GPU pods, the GPU-hours that machines held for a waiting gang kept idle, and the check that no
 * gang is ever partly placed or partly held. Pure: trace time drives it.
 */
import { gangSizeOf, gpuFreeMilli, GPU_MILLI_WHOLE } from '../domain/resources.js';
import type { MachineView, Plan, QueuedStage } from '../scheduler/snapshot.js';
import type { TracePod } from './alibaba-trace.js';
import { replayTrace, serverPlanner, summarise, type Planner, type ReplayPass, type ReplayStep, type SummaryStats } from './trace-replay.js';

export interface GangReplayOptions {
  /** Hold a waiting gang its machine set (the planner's default); false: it waits holding nothing. */
  reservations: boolean;
  /** Default `serverPlanner()`, the server's pass. */
  planner?: Planner;
}

export interface WaitFigures {
  pods: number;
  placed: number;
  /** Placement − arrival over the placed, seconds; null when none was placed. */
  waitSeconds: SummaryStats | null;
}

export interface GangReplayResult {
  gangs: WaitFigures & { gpus: number };
  /** The pods with GPUs that are not gangs (one machine each, most of them one GPU or a share). */
  otherGpuPods: WaitFigures;
  /**
   * GPUs free on machines held for a waiting gang, integrated over time, GPU-seconds (a GPU shared
   * in part counts its free thousandths): what the reservations cost. Zero without them.
   */
  gangHeldIdleGpuSeconds: number;
  /** The same for machines held for a waiting multi-GPU pod of one machine (docs/scheduling.md, "Reservations"), under either policy. */
  stageHeldIdleGpuSeconds: number;
  /** Gang placements checked whole (every member, distinct machines, each its full request). */
  gangPlacementsChecked: number;
  /** Each gang's arrival and placement (null: still waiting when the replay ended), trace seconds. */
  gangTimes: { stageId: string; arrival: number; placedAt: number | null }[];
  passes: number;
  startTime: number;
  lastArrival: number;
  endTime: number;
}

/** A gang placed or held in part: a scheduler bug, which the replay stops on. */
export class PartialGangError extends Error {}

/**
 * Throws PartialGangError unless every gang in the plan is placed whole (one member per rank on
 * distinct machines, each with its full GPU count) or held whole (`size` distinct machines, or,
 * without reservations, none). Returns how many gang placements it checked.
 */
export function checkGangsWhole(plan: Plan, queued: ReadonlyMap<string, QueuedStage>, reservations: boolean): number {
  let checked = 0;
  for (const p of plan.placements) {
    const stage = queued.get(p.stageId);
    if (stage === undefined) continue;
    const size = gangSizeOf(stage.resources);
    const members = p.members;
    if (size < 2) {
      if (members !== undefined && members.length !== 1) throw new PartialGangError(`${p.stageId} is one machine's stage, placed as ${members.length} members`);
      continue;
    }
    if (members === undefined || members.length !== size)
      throw new PartialGangError(`gang ${p.stageId} of ${size} placed with ${members?.length ?? 1} members`);
    if (new Set(members.map((m) => m.machineId)).size !== size) throw new PartialGangError(`gang ${p.stageId}: two members on one machine`);
    const count = stage.resources.gpu?.count ?? 0;
    for (const [i, m] of members.entries()) {
      if (m.rank !== i) throw new PartialGangError(`gang ${p.stageId}: member ${i} has rank ${m.rank}`);
      if (m.gpuIndices.length !== count) throw new PartialGangError(`gang ${p.stageId}: rank ${m.rank} has ${m.gpuIndices.length} of ${count} GPUs`);
    }
    if (members[0]!.machineId !== p.machineId) throw new PartialGangError(`gang ${p.stageId}: its machine is not rank 0's`);
    checked += 1;
  }
  const holds = new Map<string, Set<string>>();
  for (const r of plan.reservations ?? []) {
    const stage = queued.get(r.stageId);
    if (stage === undefined || gangSizeOf(stage.resources) < 2) continue;
    if (!holds.has(r.stageId)) holds.set(r.stageId, new Set());
    holds.get(r.stageId)!.add(r.machineId);
  }
  for (const [stageId, machines] of holds) {
    if (!reservations) throw new PartialGangError(`gang ${stageId} holds ${machines.size} machines with gang reservations off`);
    const size = gangSizeOf(queued.get(stageId)!.resources);
    if (machines.size !== size) throw new PartialGangError(`gang ${stageId} of ${size} holds ${machines.size} machines`);
  }
  return checked;
}

const freeGpus = (m: MachineView) => m.gpus.reduce((n, g) => n + gpuFreeMilli(g), 0) / GPU_MILLI_WHOLE;

/**
 * Replays `pods` (gangs among them: `resources.machines` ≥ 2, as `withGangs` makes them) on the
 * machines through `replayTrace` with `gangs: true` and `gangReservations` as asked, checking every
 * pass (`checkGangsWhole`) and integrating the idle GPUs of held machines between event times.
 */
export function replayGangs(machines: readonly MachineView[], pods: readonly TracePod[], opts: GangReplayOptions): GangReplayResult {
  const isGang = (p: TracePod) => gangSizeOf(p.stage.resources) >= 2;
  const gangIds = new Set(pods.filter(isGang).map((p) => p.stage.stageId));
  let checked = 0;
  const onPass = ({ snapshot, plan }: ReplayPass) => {
    checked += checkGangsWhole(plan, new Map(snapshot.queue.map((s) => [s.stageId, s])), opts.reservations);
  };

  let gangHeld = 0;
  let stageHeld = 0;
  let last: { time: number; gang: number; stage: number } | null = null;
  const onStep = ({ time, machines: live, plan }: ReplayStep) => {
    if (last !== null) {
      gangHeld += last.gang * (time - last.time);
      stageHeld += last.stage * (time - last.time);
    }
    const byId = new Map(live.map((m) => [m.id, m]));
    const heldFor = new Map<string, string>();
    for (const r of plan?.reservations ?? []) heldFor.set(r.machineId, r.stageId);
    let gang = 0;
    let stage = 0;
    for (const [machineId, stageId] of heldFor) {
      const free = freeGpus(byId.get(machineId)!);
      if (gangIds.has(stageId)) gang += free;
      else stage += free;
    }
    last = { time, gang, stage };
  };

  const r = replayTrace(machines, pods, {
    planner: opts.planner ?? serverPlanner(),
    planOptions: { gangs: true, gangReservations: opts.reservations },
    onPass,
    onStep,
  });

  const placedAt = new Map(r.placements.map((p) => [p.stageId, p]));
  const figures = (of: TracePod[]): WaitFigures => {
    const waits = of.flatMap((p) => {
      const placed = placedAt.get(p.stage.stageId);
      return placed === undefined ? [] : [placed.waitSeconds];
    });
    return { pods: of.length, placed: waits.length, waitSeconds: summarise(waits) };
  };
  const gangs = pods.filter(isGang);
  const others = pods.filter((p) => !isGang(p) && p.stage.resources.gpu);
  return {
    gangs: { ...figures(gangs), gpus: gangs.reduce((n, p) => n + gangSizeOf(p.stage.resources) * (p.stage.resources.gpu?.count ?? 0), 0) },
    otherGpuPods: figures(others),
    gangHeldIdleGpuSeconds: gangHeld,
    stageHeldIdleGpuSeconds: stageHeld,
    gangPlacementsChecked: checked,
    gangTimes: gangs.map((p) => ({ stageId: p.stage.stageId, arrival: p.creationTime, placedAt: placedAt.get(p.stage.stageId)?.placedAt ?? null })),
    passes: r.stats.passes,
    startTime: r.stats.startTime,
    lastArrival: r.stats.lastArrival,
    endTime: r.stats.endTime,
  };
}
