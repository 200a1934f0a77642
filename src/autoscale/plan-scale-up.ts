import { stageNeed } from '../scheduler/checks.js';
import { gangNeedOf } from '../scheduler/gang-placer.js';
import { describeGpus } from '../scheduler/pending-reason.js';
import { DEFAULT_MAX_PLACEMENTS, planPlacements, type PlanOptions } from '../scheduler/plan-placements.js';
import { placementMembers } from '../scheduler/placement-members.js';
import { takeAllocation } from '../scheduler/placement-fit.js';
import type { MachineView, Plan, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';
import { teamOf } from '../scheduler/team-ledger.js';
import { formatCpu, formatMemory } from '../spec/quantity.js';
import { templateMachine, type PoolTemplate } from './pool-template.js';
import { MisfitKind, templateMisfit } from './template-misfit.js';

/** A pool's machines as the autoscaler counts them (machine-lifecycle.ts). */
export interface PoolState {
  pool: string;
  /** Machines that count toward min and max: provisioning, joining and ready (not draining, failed or released). */
  counted: number;
  /** Of those, the ones on their way in (provisioning, joining): not in the snapshot yet, counted as supply. */
  starting: number;
  /** Starts asked of the provider in the current interval. */
  startedThisInterval: number;
  /** No start before this time (ms): a boot failed and the pool backs off. Absent or null: none. */
  backoffUntil?: number | null;
  /** Of the counted machines, the ready ones on which nothing holds room (for spareMachines; absent: 0). */
  idle?: number;
  /**
   * Per starting machine (at most `starting` of them), the stages it was started for
   * (ScaleUpStart.machineStages): when it joins they go there first ("Held for the stages it was
   * started for" in docs/autoscaling.md), so the simulation puts them there before anything else.
   * Stages no longer waiting are ignored. Absent, or shorter than `starting`: the rest hold nothing.
   */
  startingFor?: readonly (readonly string[])[];
}

export interface ScaleUpInput {
  /** The snapshot the scheduler's pass saw. Machines still starting are not in it (they have not registered). */
  snapshot: SchedulerSnapshot;
  /** That pass's plan: its pending stages are the ones that wait. */
  plan: Plan;
  pools: readonly PoolTemplate[];
  /** Per pool; a pool not listed has no machines and started none. */
  state: readonly PoolState[];
  /** ms. */
  now: number;
  /** As the scheduler passes them (candidate limit); placements are not capped in the simulation. */
  planOptions?: PlanOptions;
  /**
   * At most this many new machines in one decision, over all pools (default
   * DEFAULT_MAX_STARTS_PER_DECISION). It bounds the work of a call (each simulated pass costs about
   * its placements × machines) and the burst asked of providers at once; what it leaves is looked
   * at again at the next interval, when the machines started now count as supply.
   */
  maxStartsPerDecision?: number;
}

export const DEFAULT_MAX_STARTS_PER_DECISION = 100;

/** Start `count` machines of `pool`, and why, in words. */
export interface ScaleUpStart {
  pool: string;
  count: number;
  /** "3 stages of team vision wait for 8 h100 GPUs: starting 1 machine of template h100". */
  reason: string;
  /** The waiting stages the simulated pass placed on these machines (empty for a start to reach min). */
  stageIds: string[];
  /**
   * For a start for waiting stages: per machine (`count` of them), the stages the simulated pass
   * put there. The machine is held for them when it joins (PoolState.startingFor): a stage that
   * came later, even of a higher priority, does not take it, or the stage it was started for would
   * wait for another boot. Absent for starts to keep machines spare, and for starts to reach min on
   * which no waiting stage goes.
   */
  machineStages?: string[][];
}

/** Why a waiting stage starts no machine. */
export const WaitKind = {
  /** The simulated pass placed it on a machine there now: the next pass will (no start needed). */
  fitsNow: 'fits-now',
  /** A machine already starting takes it. */
  starting: 'starting',
  /** The pass preempts for it: room is being made. */
  preempting: 'preempting',
  /** Its team's quota stops it whatever the machines. */
  quota: 'quota',
  /** Every template that could run it is at its pool's max. */
  atMax: 'at-max',
  /** Every template that could run it has started its most for this interval. */
  startLimit: 'start-limit',
  /** Every template that could run it is backing off after a failed boot. */
  backoff: 'backoff',
  /** This decision started its most machines (maxStartsPerDecision); the next one looks at it again. */
  decisionLimit: 'decision-limit',
  /** A template could run it, and room was left, but the simulated pass still did not place it (its reason says why). */
  notPlaced: 'not-placed',
} as const;
export type WaitKind = (typeof WaitKind)[keyof typeof WaitKind];

export interface WaitingStage {
  stageId: string;
  kind: WaitKind | MisfitKind;
  /** What `explain` shows: "a machine of template h100 is starting for it, up to 600 s". */
  reason: string;
  /** The pool that serves it (starting) or stops it (at max, start limit, backoff), where one does. */
  pool?: string;
  /**
   * Starting: which starting machines take it (each an index into its pool's PoolState.startingFor):
   * one, or for a gang each of its members' that is starting. The caller adds the stage to each
   * one's hold, so that it keeps the room counted for it when the machine joins, as the stages the
   * machine was started for do. Absent for one a start of this decision takes
   * (ScaleUpStart.machineStages says which).
   */
  startingOn?: { pool: string; index: number }[];
}

export interface ScaleUpPlan {
  starts: ScaleUpStart[];
  /** Every waiting stage for which no machine is started, with why. */
  waiting: WaitingStage[];
}

/** Ids of the machines the simulation adds (a real machine's id is never one of these: ids are generated). */
const STARTING_PREFIX = 'autoscale-starting:';
const NEW_PREFIX = 'autoscale-new:';
/**
 * Their names sort after every real name, starting ones before new ones: the pass breaks ties
 * between equally good machines by name, so a stage goes to a machine there or starting before
 * it is counted as needing a new one.
 */
const NAME_AFTER: Record<string, string> = { [STARTING_PREFIX]: '\uFFFE', [NEW_PREFIX]: '\uFFFF' };

interface Sim {
  /** Waiting stages placed, with the machine ids they went to: one, or a gang's members' (rank 0 first). */
  placed: Map<string, string[]>;
  pendingReason: Map<string, string>;
}

/**
 * What to start (issue 30, docs/autoscaling.md "Deciding to start"), pure, with time injected:
 *
 * 1. The stages that wait are the plan's pending ones; a stage the pass preempts for is served.
 * 2. Pools below their min start up to it first (within the interval's start limit).
 * 3. The real `planPlacements` is run on the snapshot's machines plus the machines already starting
 *    (as idle machines of their template, each with the stages it was started for placed there
 *    first, as they will be when it joins: PoolState.startingFor): what it places there starts nothing.
 * 4. Greedy rounds, as cluster-autoscaler's expander and Karpenter's provisioner do: in each round
 *    every pool with room left (max, start limit, backoff) is tried by adding as many idle machines of
 *    its template as its room allows and running the pass again; the pool that places the most
 *    waiting stages wins, then the one that needs the fewest machines for them, then the one that
 *    leaves the least idle on them (GPU thousandths, else CPU), then the name. Only its machines that
 *    received work are kept, each with the stages it is started for (ScaleUpStart.machineStages). Rounds repeat until no pool places anything more.
 *    At most maxStartsPerDecision new machines in all (default 100): the rest waits for the next call.
 * 5. Pools with spareMachines start what their idle and unclaimed starting machines fall short of.
 * 6. Every stage still waiting gets why: no template could run it (region, labels, GPU type, too
 *    big), its team's quota (a probe pass without quotas places it), or its pools are at max, at the
 *    start limit or backing off.
 */
export function planScaleUp(input: ScaleUpInput): ScaleUpPlan {
  const { snapshot, plan, pools, now } = input;
  const byName = new Map(pools.map((p) => [p.name, p]));
  const stateOf = (pool: string): PoolState => input.state.find((s) => s.pool === pool) ?? { pool, counted: 0, starting: 0, startedThisInterval: 0 };
  const stages = new Map(snapshot.queue.map((s) => [s.stageId, s]));
  const preempting = new Set((plan.preemptions ?? []).map((p) => p.stageId));
  const waitingIds = plan.pending.map((p) => p.stageId).filter((id) => stages.has(id) && !preempting.has(id));
  const waitingSet = new Set(waitingIds);
  // Gangs planned as the server's pass plans them (docs/gangs.md): a gang placed is all its members.
  const opts: PlanOptions = { ...input.planOptions, gangs: true, maxPlacements: Math.max(DEFAULT_MAX_PLACEMENTS, snapshot.queue.length) };
  /** Machines a stage takes: a gang's size, else one. */
  const machinesOf = (id: string) => gangNeedOf(stages.get(id)!)?.size ?? 1;
  const machinesFor = (ids: readonly string[]) => ids.reduce((a, id) => a + machinesOf(id), 0);
  // Preemption is the pass's business; the simulation asks only where stages would fit.
  const base: SchedulerSnapshot = { ...snapshot, running: undefined, machines: snapshot.machines };
  const poolOfMachine = new Map<string, string>();

  // Stages held on starting machines, placed there before any pass (filled below, per pool).
  const heldPlaced = new Map<string, string[]>();
  let queueLeft = base.queue;
  const placedBy = (p: Plan, into: Map<string, string[]>) => {
    for (const x of p.placements)
      if (waitingSet.has(x.stageId))
        into.set(
          x.stageId,
          placementMembers(x).map((m) => m.machineId),
        );
    return into;
  };
  const simulate = (machines: readonly MachineView[], teams = snapshot.teams): Sim => {
    const p = planPlacements({ ...base, teams, queue: queueLeft, machines: [...machines] }, opts);
    return { placed: placedBy(p, new Map(heldPlaced)), pendingReason: new Map(p.pending.map((x) => [x.stageId, x.reason])) };
  };
  /**
   * The starting machines with the stages held for them placed there, as the pass at their join
   * does: each machine's own stages on it alone, then each gang held on several over those together
   * (a gang whose hold spans fewer machines than its size is placed by the pass that follows).
   */
  const holdOn = (starting: readonly MachineView[], held: readonly (readonly string[])[]): MachineView[] => {
    const copies = starting.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) }));
    const take = (queue: QueuedStage[], on: MachineView[]) => {
      if (queue.length === 0) return;
      const p = planPlacements({ ...base, queue, machines: on }, opts);
      for (const x of p.placements)
        for (const m of placementMembers(x))
          takeAllocation(
            on.find((c) => c.id === m.machineId)!,
            { ...x, ...m },
          );
      placedBy(p, heldPlaced);
    };
    const mine = (i: number) => (held[i] ?? []).filter((id) => waitingSet.has(id) && !heldPlaced.has(id));
    copies.forEach((c, i) =>
      take(
        mine(i)
          .filter((id) => machinesOf(id) === 1)
          .map((id) => stages.get(id)!),
        [c],
      ),
    );
    for (const id of new Set(copies.flatMap((_, i) => mine(i).filter((x) => machinesOf(x) > 1)))) {
      if (!heldPlaced.has(id))
        take(
          [stages.get(id)!],
          copies.filter((_, i) => mine(i).includes(id)),
        );
    }
    return copies;
  };

  // Room per pool: what max, the interval's start limit and a backoff leave.
  const room = new Map<string, number>();
  const roomWhy = new Map<string, WaitKind>();
  const starts: ScaleUpStart[] = [];
  const minStarts: ScaleUpStart[] = [];
  const supply: MachineView[] = [...snapshot.machines];
  const addMachines = (pool: PoolTemplate, prefix: string, count: number, from: number): MachineView[] => {
    const out: MachineView[] = [];
    for (let i = 0; i < count; i++) {
      const id = `${prefix}${pool.name}:${from + i}`;
      poolOfMachine.set(id, pool.name);
      out.push(templateMachine(pool.template, id, `${NAME_AFTER[prefix.startsWith(NEW_PREFIX) ? NEW_PREFIX : STARTING_PREFIX]}${id}`));
    }
    return out;
  };
  for (const pool of [...pools].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const s = stateOf(pool.name);
    const a = pool.autoscale;
    const byMax = Math.max(0, a.max - s.counted);
    const byInterval = a.maxStartsPerInterval === null ? Infinity : Math.max(0, a.maxStartsPerInterval - s.startedThisInterval);
    const backingOff = s.backoffUntil != null && now < s.backoffUntil;
    let left = backingOff ? 0 : Math.min(byMax, byInterval);
    roomWhy.set(pool.name, backingOff ? WaitKind.backoff : byMax <= byInterval ? WaitKind.atMax : WaitKind.startLimit);
    supply.push(...holdOn(addMachines(pool, STARTING_PREFIX, s.starting, 0), s.startingFor ?? []));
    const belowMin = Math.min(left, Math.max(0, a.min - s.counted));
    if (belowMin > 0) {
      minStarts.push({
        pool: pool.name,
        count: belowMin,
        reason: `pool ${pool.name} has ${s.counted} ${s.counted === 1 ? 'machine' : 'machines'}, below its min ${a.min}: starting ${machines(belowMin)} of template ${pool.name}`,
        stageIds: [],
      });
      starts.push(minStarts[minStarts.length - 1]!);
      supply.push(...addMachines(pool, STARTING_PREFIX, belowMin, s.starting));
      left -= belowMin;
    }
    room.set(pool.name, left);
  }

  queueLeft = base.queue.filter((q) => !heldPlaced.has(q.stageId));
  const baseline = simulate(supply);
  let placed = baseline.placed;
  const chosen: MachineView[] = [];
  const added = new Map<string, { count: number; stageIds: string[]; machineStages: string[][] }>();
  const cap = Math.max(0, Math.floor(input.maxStartsPerDecision ?? DEFAULT_MAX_STARTS_PER_DECISION));
  for (;;) {
    const capLeft = cap - chosen.length;
    if (capLeft <= 0) break;
    let best: { pool: PoolTemplate; sim: Sim; used: MachineView[]; gain: number; waste: number } | null = null;
    for (const pool of pools) {
      const left = room.get(pool.name) ?? 0;
      if (left <= 0) continue;
      const from = added.get(pool.name)?.count ?? 0;
      // More than the machines the stages left to place take (one each, a gang its size) is never needed.
      const trial = addMachines(pool, NEW_PREFIX, Math.min(left, machinesFor(waitingIds.filter((id) => !placed.has(id))), capLeft), from);
      const sim = simulate([...supply, ...chosen, ...trial]);
      // A gang counts once, as a stage placed; the machines it takes count in full (`used`).
      const gain = sim.placed.size - placed.size;
      if (gain <= 0) continue;
      const usedIds = new Set([...sim.placed.values()].flat());
      const used = trial.filter((m) => usedIds.has(m.id));
      if (used.length === 0) continue;
      const waste = idleShare(used, sim, stages);
      const better =
        best === null ||
        gain > best.gain ||
        (gain === best.gain &&
          (used.length < best.used.length ||
            (used.length === best.used.length && (waste < best.waste || (waste === best.waste && pool.name < best.pool.name)))));
      if (better) best = { pool, sim, used, gain, waste };
    }
    if (best === null) break;
    chosen.push(...best.used);
    room.set(best.pool.name, (room.get(best.pool.name) ?? 0) - best.used.length);
    const usedIds = new Set(best.used.map((m) => m.id));
    const entry = added.get(best.pool.name) ?? { count: 0, stageIds: [], machineStages: [] };
    entry.count += best.used.length;
    const slot = new Map(best.used.map((m) => [m.id, entry.machineStages.push([]) - 1]));
    // A gang is held on every machine of this start that it took (each member's), and named once.
    for (const [stageId, machineIds] of best.sim.placed) {
      const mine = machineIds.filter((m) => usedIds.has(m));
      if (mine.length > 0) entry.stageIds.push(stageId);
      for (const m of mine) entry.machineStages[slot.get(m)!]!.push(stageId);
    }
    added.set(best.pool.name, entry);
    placed = best.sim.placed;
  }

  const final = chosen.length > 0 ? simulate([...supply, ...chosen]) : baseline;
  for (const [pool, { count, stageIds, machineStages }] of [...added].sort(([a], [b]) => (a < b ? -1 : 1))) {
    starts.push({
      pool,
      count,
      stageIds,
      machineStages,
      reason: `${describeWaiting(stageIds.map((id) => stages.get(id)!))}: starting ${machines(count)} of template ${pool}`,
    });
  }
  // A start to reach min is held, too, for the waiting stages the simulated pass put on it.
  for (const start of minStarts) {
    const first = stateOf(start.pool).starting;
    const perMachine = Array.from({ length: start.count }, (_, j) =>
      [...final.placed].filter(([, ms]) => ms.includes(`${STARTING_PREFIX}${start.pool}:${first + j}`)).map(([stageId]) => stageId),
    );
    if (perMachine.some((ids) => ids.length > 0)) start.machineStages = perMachine;
  }
  // Spare machines, after demand: idle ready ones and starting ones no waiting stage takes count.
  const claimed = new Set([...final.placed.values()].flat());
  for (const pool of pools) {
    const spare = pool.autoscale.spareMachines;
    if (spare <= 0) continue;
    const unclaimed = supply.filter((m) => m.id.startsWith(STARTING_PREFIX) && poolOfMachine.get(m.id) === pool.name && !claimed.has(m.id)).length;
    const have = (stateOf(pool.name).idle ?? 0) + unclaimed;
    const n = Math.min(room.get(pool.name) ?? 0, spare - have);
    if (n <= 0) continue;
    room.set(pool.name, (room.get(pool.name) ?? 0) - n);
    starts.push({
      pool: pool.name,
      count: n,
      stageIds: [],
      reason: `pool ${pool.name} keeps ${machines(spare)} spare, has ${have}: starting ${machines(n)} of template ${pool.name}`,
    });
  }

  // Why the rest start nothing: a probe with every pool's remaining room, with and without quotas.
  const unplaced = waitingIds.filter((id) => !final.placed.has(id));
  let probe: Sim | null = null;
  let probeFree: Sim | null = null;
  let beyondRoom: Sim | null = null;
  if (unplaced.length > 0) {
    // Bounded like a round (the cap): enough to tell a stage held by its quota from one that needs a machine.
    const rest = pools.flatMap((p) => addMachines(p, `${NEW_PREFIX}probe:`, Math.min(room.get(p.name) ?? 0, machinesFor(unplaced), Math.max(1, cap)), 0));
    probe = simulate([...supply, ...chosen, ...rest]);
    probeFree = snapshot.teams
      ? simulate(
          [...supply, ...chosen, ...rest],
          snapshot.teams.map((t) => ({ ...t, quota: {} })),
        )
      : probe;
    // A gang the room left cannot place: would machines beyond it (max, start limit, backoff)? Then
    // that is why it waits, though each pool has room for some of its members.
    // Bounded like a round too, but never below the largest such gang's size.
    const gangSize = Math.max(0, ...unplaced.map(machinesOf).filter((n) => n > 1));
    if (gangSize > 0) {
      const beyond = pools.flatMap((p) => addMachines(p, `${NEW_PREFIX}beyond:`, Math.min(machinesFor(unplaced), Math.max(cap, gangSize)), 0));
      beyondRoom = simulate([...supply, ...chosen, ...beyond]);
    }
  }
  const waiting: WaitingStage[] = [];
  for (const id of waitingIds) {
    const at = final.placed.get(id);
    if (at !== undefined) {
      // A gang with a member on a machine this decision starts is that start's (machineStages); its
      // members on machines already starting are held there at the next decision, when it waits on them.
      if (at.some((m) => m.startsWith(NEW_PREFIX))) continue;
      const starting = at.filter((m) => m.startsWith(STARTING_PREFIX));
      if (starting.length > 0) {
        const pool = poolOfMachine.get(starting[0]!)!;
        const on = starting
          .map((m) => ({ pool: poolOfMachine.get(m)!, index: Number(m.slice(m.lastIndexOf(':') + 1)) }))
          .filter((o) => o.index < stateOf(o.pool).starting);
        const boot = byName.get(pool)!.autoscale.bootTimeoutSeconds;
        waiting.push({
          stageId: id,
          kind: WaitKind.starting,
          pool,
          reason:
            starting.length > 1
              ? `${machines(starting.length)} of template ${pool} are starting for its gang, up to ${boot} s`
              : `a machine of template ${pool} is starting for it, up to ${boot} s`,
          ...(on.length > 0 ? { startingOn: on } : {}),
        });
      } else {
        waiting.push({ stageId: id, kind: WaitKind.fitsNow, reason: 'a machine has room for it now: the next pass places it' });
      }
      continue;
    }
    waiting.push(whyNoStart(id, stages.get(id)!, pools, room, roomWhy, final, probe, probeFree, beyondRoom, stateOf, { cap, left: cap - chosen.length }));
  }
  for (const id of preempting)
    if (stages.has(id)) waiting.push({ stageId: id, kind: WaitKind.preempting, reason: 'the scheduler is preempting to make room for it' });
  return { starts, waiting };
}

function whyNoStart(
  id: string,
  stage: QueuedStage,
  pools: readonly PoolTemplate[],
  room: ReadonlyMap<string, number>,
  roomWhy: ReadonlyMap<string, WaitKind>,
  final: Sim,
  probe: Sim | null,
  probeFree: Sim | null,
  /** A probe with machines beyond every pool's room, where a gang waits; null otherwise. */
  beyondRoom: Sim | null,
  stateOf: (pool: string) => PoolState,
  /** The per-decision cap, and the new machines it left. */
  cap: { cap: number; left: number },
): WaitingStage {
  const need = stageNeed(stage);
  const gang = gangNeedOf(stage);
  const misfit = templateMisfit(need, pools);
  if (misfit !== null) return { stageId: id, ...misfit };
  if (gang?.sameLabel != null && !pools.some((p) => Object.hasOwn(p.template.labels, gang.sameLabel!))) {
    return {
      stageId: id,
      kind: MisfitKind.labels,
      reason: `its gang wants machines of one ${gang.sameLabel} (placement.sameLabel): no template carries that label`,
    };
  }
  const fitting = pools.filter((p) => templateMisfit(need, [p]) === null);
  if (probeFree?.placed.has(id) && !probe?.placed.has(id)) {
    return { stageId: id, kind: WaitKind.quota, reason: `its team's quota stops it, whatever machines start: ${probe?.pendingReason.get(id) ?? 'at quota'}` };
  }
  const open = fitting.filter((p) => (room.get(p.name) ?? 0) > 0);
  if (open.length === 0) {
    const p = fitting[0]!;
    const kind = roomWhy.get(p.name) ?? WaitKind.atMax;
    const s = stateOf(p.name);
    const reason =
      kind === WaitKind.backoff
        ? `template ${p.name} is backing off after a machine failed to join`
        : kind === WaitKind.startLimit
          ? `template ${p.name} has started its ${p.autoscale.maxStartsPerInterval} machines for this interval`
          : `template ${p.name} is at its max of ${p.autoscale.max} ${p.autoscale.max === 1 ? 'machine' : 'machines'} (${s.counted} up or starting)`;
    return { stageId: id, kind, pool: p.name, reason: fitting.length > 1 ? `${reason} (as are the other ${fitting.length - 1} that could run it)` : reason };
  }
  if (gang !== null && !probe?.placed.has(id) && beyondRoom?.placed.has(id)) {
    // Each open pool has room for some members, not for the gang: the pool's limit is why.
    const p = open[0]!;
    const kind = roomWhy.get(p.name) ?? WaitKind.atMax;
    const left = room.get(p.name) ?? 0;
    const limit =
      kind === WaitKind.backoff
        ? `template ${p.name} is backing off after a machine failed to join`
        : kind === WaitKind.startLimit
          ? `template ${p.name} may start ${machines(left)} more this interval (of ${p.autoscale.maxStartsPerInterval})`
          : `template ${p.name} may start ${machines(left)} more before its max of ${p.autoscale.max}`;
    return { stageId: id, kind, pool: p.name, reason: `${limit}: its gang needs ${gang.size}` };
  }
  // A stage takes one of the new machines the cap left, a gang its size.
  if (cap.left < (gang?.size ?? 1)) {
    return {
      stageId: id,
      kind: WaitKind.decisionLimit,
      reason:
        cap.left > 0
          ? `this decision may start ${machines(cap.left)} more (of ${cap.cap}), its gang needs ${gang!.size}: the next interval looks at it again`
          : `this decision started its most (${machines(cap.cap)}): the next interval looks at it again`,
    };
  }
  return {
    stageId: id,
    kind: WaitKind.notPlaced,
    reason: `a template could run it, yet the simulated pass did not place it: ${probe?.pendingReason.get(id) ?? final.pendingReason.get(id) ?? 'unknown'}`,
  };
}

function machines(n: number): string {
  return `${n} ${n === 1 ? 'machine' : 'machines'}`;
}

/** "8 h100 GPUs", "any 1 GPU", "4 CPU, 8Gi", "3 machines × 8 h100 GPUs" (a gang): what a stage waits for. */
function describeAsk(s: QueuedStage): string {
  const need = stageNeed(s);
  const each = need.gpuCount > 0 ? describeGpus(need.gpuCount, need.gpuTypes) : `${formatCpu(need.cpuMillis)} CPU, ${formatMemory(need.memoryBytes)}`;
  const gang = gangNeedOf(s);
  return gang === null ? each : `${gang.size} machines × ${each}`;
}

/** "3 stages of team vision wait for 8 h100 GPUs; 1 stage of team nlp waits for 2 h100 GPUs", at most three groups named. */
function describeWaiting(stages: readonly QueuedStage[]): string {
  const groups = new Map<string, number>();
  for (const s of stages) {
    const key = `${teamOf(s)}\u0000${describeAsk(s)}`;
    groups.set(key, (groups.get(key) ?? 0) + 1);
  }
  const sorted = [...groups].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const parts = sorted.slice(0, 3).map(([key, n]) => {
    const [team, ask] = key.split('\u0000');
    return `${n} ${n === 1 ? 'stage' : 'stages'} of team ${team} ${n === 1 ? 'waits' : 'wait'} for ${ask}`;
  });
  if (sorted.length > 3) parts.push(`and ${sorted.slice(3).reduce((a, [, n]) => a + n, 0)} more`);
  return parts.join('; ');
}

/**
 * What the machines would leave idle once the simulated pass placed its stages there, as a share of
 * what they have: GPUs for GPU machines, else CPU. Lower is the tighter fit.
 */
function idleShare(used: readonly MachineView[], sim: Sim, stages: ReadonlyMap<string, QueuedStage>): number {
  let total = 0;
  let taken = 0;
  const ids = new Set(used.map((m) => m.id));
  const gpus = used[0]!.gpus.length > 0;
  // GPUs in thousandths: a share leaves the rest of its GPU idle.
  for (const m of used) total += gpus ? m.gpus.length * 1000 : m.cpuMillisTotal;
  // A gang takes a member's need on each of its machines.
  for (const [stageId, machineIds] of sim.placed) {
    const need = stageNeed(stages.get(stageId)!);
    for (const m of machineIds) if (ids.has(m)) taken += gpus ? need.gpuCount * need.gpuMilli : need.cpuMillis;
  }
  return total > 0 ? (total - taken) / total : 0;
}
