import { firstReject, isBusyReason, type StageNeed } from './checks.js';
import { GPU_MILLI_WHOLE } from '../domain/resources.js';
import { groupsOf, type GangNeed } from './gang-placer.js';
import { releaseAllocation, takeAllocation } from './placement-fit.js';
import { compareMachines } from './rank.js';
import type { MachineView, QueuedStage, RunningAttempt } from './snapshot.js';
import { teamOf, type TeamLedger } from './team-ledger.js';

export const DEFAULT_PREEMPTION_COOLDOWN_MS = 300_000;

export interface PreemptionInputs {
  running: readonly RunningAttempt[];
  now: number;
  cooldownMs: number;
  ledger: TeamLedger;
  /** Attempts already chosen as victims in this pass. */
  taken: Set<string>;
  /** Machines held for stages before this one in this pass. */
  held: ReadonlySet<string>;
}

export type PreemptionChoice =
  /** Attempts already leaving this machine will free enough: wait for them, preempt nothing more. */
  { kind: 'wait'; machine: MachineView } | { kind: 'preempt'; machine: MachineView; victims: RunningAttempt[]; why: string };

/** Work lost by stopping it now, as [GPU-seconds, CPU-seconds]: GPU time first, it is what costs; a quarter share's is a quarter. */
function lostWork(a: RunningAttempt, now: number): [number, number] {
  const s = Math.max(0, now - a.startedAt) / 1000;
  return [(a.gpuIndices.length * (a.gpuMilli ?? GPU_MILLI_WHOLE) * s) / GPU_MILLI_WHOLE, (a.cpuMillis / 1000) * s];
}

const sumLoss = (xs: readonly [number, number][]): [number, number] => xs.reduce<[number, number]>((s, x) => [s[0] + x[0], s[1] + x[1]], [0, 0]);

function compareLoss(x: [number, number], y: [number, number]): number {
  return x[0] - y[0] || x[1] - y[1];
}

function copyOf(m: MachineView): MachineView {
  return { ...m, gpus: m.gpus.map((g) => ({ ...g })) };
}

/**
 * Whether `victim` may be stopped for `stage`, and why. Only a preemptible, active attempt whose
 * stage was not preempted within the cool-down; then either of lower priority (priority
 * preemption), or its team is beyond its quota (borrowing) and the stage's team reclaims capacity
 * inside its own quota (Kueue's reclaimWithinCohort). Never an equal or higher priority otherwise,
 * never a non-preemptible attempt.
 */
export function victimReason(stage: QueuedStage, victim: RunningAttempt, inputs: PreemptionInputs): string | null {
  if (victim.leaving || !victim.preemptible || inputs.taken.has(victim.attemptId)) return null;
  if (victim.stagePreemptedAt !== null && inputs.now - victim.stagePreemptedAt < inputs.cooldownMs) return null;
  if (victim.priority < stage.priority) return `priority ${stage.priority} over ${victim.priority}`;
  const team = teamOf(stage);
  if (victim.team !== team && inputs.ledger.hasQuota(team) && inputs.ledger.borrowing(victim.team)) {
    return `team ${team} reclaiming its quota from team ${victim.team}, which borrows beyond its own`;
  }
  return null;
}

/** The running attempts by machine, and each gang's active members by rank: what every machine's choice reads. */
interface RunningIndex {
  byMachine: Map<string, RunningAttempt[]>;
  gangs: Map<string, RunningAttempt[]>;
}

function indexRunning(running: readonly RunningAttempt[]): RunningIndex {
  const byMachine = new Map<string, RunningAttempt[]>();
  const gangs = new Map<string, RunningAttempt[]>();
  for (const a of running) {
    const list = byMachine.get(a.machineId) ?? [];
    list.push(a);
    byMachine.set(a.machineId, list);
    if (a.gang === undefined || a.leaving) continue;
    const members = gangs.get(a.gang.id) ?? [];
    members.push(a);
    gangs.set(a.gang.id, members);
  }
  for (const members of gangs.values()) members.sort((x, y) => x.gang!.rank - y.gang!.rank);
  return { byMachine, gangs };
}

/**
 * What stopping `a` stops: itself, or, for a gang's member, every active member of its gang
 * (docs/gangs.md, "Preemption": one member ending ends them all), `a` first, then by rank.
 */
function unitOf(a: RunningAttempt, index: RunningIndex): RunningAttempt[] {
  if (a.gang === undefined) return [a];
  return [a, ...(index.gangs.get(a.gang.id) ?? []).filter((x) => x.attemptId !== a.attemptId)];
}

/**
 * How one member of work could have room on one machine that would fit it when idle: attempts
 * already leaving it free enough (`wait`, nothing lost), or the cheapest set of victims that does
 * (`preempt`), or null. A victim is a unit: a gang's member costs and takes its whole gang.
 */
type MachineOption = { kind: 'wait' } | { kind: 'preempt'; victims: RunningAttempt[]; loss: [number, number]; why: string };

function machineOption(stage: QueuedStage, need: StageNeed, m: MachineView, index: RunningIndex, inputs: PreemptionInputs): MachineOption | null {
  const here = index.byMachine.get(m.id) ?? [];
  const copy = copyOf(m);
  // Room already on its way: attempts the server has ended whose agents are killing them, and
  // those this pass chose already (a gang taken elsewhere leaves this machine too).
  for (const a of here) if (a.leaving || inputs.taken.has(a.attemptId)) releaseAllocation(copy, a);
  if (firstReject(need, copy) === null) return { kind: 'wait' };
  const pool = here
    .filter((a) => !a.leaving && !inputs.taken.has(a.attemptId))
    .map((a) => {
      const unit = unitOf(a, index);
      const reasons = unit.map((x) => victimReason(stage, x, inputs));
      return { a, unit, why: reasons.every((r) => r !== null) ? reasons[0]! : null, loss: sumLoss(unit.map((x) => lostWork(x, inputs.now))) };
    })
    .filter((v): v is { a: RunningAttempt; unit: RunningAttempt[]; why: string; loss: [number, number] } => v.why !== null)
    .sort((x, y) => compareLoss(x.loss, y.loss) || x.a.priority - y.a.priority || y.a.startedAt - x.a.startedAt || (x.a.attemptId < y.a.attemptId ? -1 : 1));
  // Only what a unit holds on this machine frees room here (a gang's members never share one).
  const onHere = (unit: readonly RunningAttempt[]) => unit.filter((x) => x.machineId === m.id);
  const chosen: typeof pool = [];
  for (const v of pool) {
    if (firstReject(need, copy) === null) break;
    for (const x of onHere(v.unit)) releaseAllocation(copy, x);
    chosen.push(v);
  }
  if (firstReject(need, copy) !== null) return null;
  // Prune: the greedy set may hold a victim the others make unnecessary (the dearest first).
  for (let i = chosen.length - 1; i >= 0; i--) {
    const v = chosen[i]!;
    const trial = copyOf(copy);
    // Put it back (only what it holds: a share its thousandths): is the stage still placed?
    for (const x of onHere(v.unit)) takeAllocation(trial, x);
    if (firstReject(need, trial) === null) {
      chosen.splice(i, 1);
      Object.assign(copy, { cpuMillisFree: trial.cpuMillisFree, memoryBytesFree: trial.memoryBytesFree, gpus: trial.gpus });
    }
  }
  return { kind: 'preempt', victims: chosen.flatMap((v) => v.unit), loss: sumLoss(chosen.map((v) => v.loss)), why: chosen[0]!.why };
}

/** Least work lost, then fewest victims, then the machine's name: how two ways to make room compare. */
function cheaper(
  x: { loss: [number, number]; victims: number; machine: MachineView },
  y: { loss: [number, number]; victims: number; machine: MachineView },
): boolean {
  const byLoss = compareLoss(x.loss, y.loss);
  return byLoss < 0 || (byLoss === 0 && (x.victims < y.victims || (x.victims === y.victims && compareMachines(x.machine, y.machine) < 0)));
}

/**
 * How a stage that found no room could run (docs/scheduling.md, "Preemption"): on a machine that
 * would fit it when idle, either wait for attempts already leaving it, or stop the fewest
 * GPU-seconds of work since their start (where each attempt resumed from its last checkpoint)
 * that frees enough. The set on a machine is found greedily, cheapest first, then pruned of any
 * victim not needed; among machines, the least work lost, then the fewest victims, then the
 * machine's name. Null when nothing allowed would free enough. Pure: `machines` are the pass's
 * working copies and are not changed. Shares of a GPU: a victim frees only what it holds
 * (`gpuMilli` of its GPU), so a waiting share may stop share holders or a whole-GPU holder until
 * one GPU has its thousandths free, and a whole-GPU stage must free every share on a GPU;
 * `firstReject` judges the freed copy either way. A gang's member as a victim is its whole gang:
 * its cost is every member's lost work, and every member is among the victims.
 */
export function choosePreemption(stage: QueuedStage, need: StageNeed, machines: readonly MachineView[], inputs: PreemptionInputs): PreemptionChoice | null {
  const index = indexRunning(inputs.running);
  let best: { machine: MachineView; victims: RunningAttempt[]; loss: [number, number]; why: string } | null = null;
  for (const m of machines) {
    if (inputs.held.has(m.id)) continue;
    const r = firstReject(need, m);
    if (r === null || !isBusyReason(r)) continue;
    const o = machineOption(stage, need, m, index, inputs);
    if (o === null) continue;
    // Waiting for room already leaving beats stopping anything, on the first such machine.
    if (o.kind === 'wait') return { kind: 'wait', machine: m };
    if (best === null || cheaper({ ...o, victims: o.victims.length, machine: m }, { ...best, victims: best.victims.length })) best = { machine: m, ...o };
  }
  return best ? { kind: 'preempt', machine: best.machine, victims: best.victims, why: best.why } : null;
}

export type GangPreemptionChoice =
  /** Room on every machine of the set is free or already leaving: hold them and wait, stop nothing. */
  | { kind: 'wait'; machines: MachineView[] }
  /** The set, and on each machine of it where something must stop, the victims. */
  | { kind: 'preempt'; machines: MachineView[]; stops: { machine: MachineView; victims: RunningAttempt[]; why: string }[] };

/** How many victim gangs a waiting gang's choice starts a fill from (chooseGangPreemption), beside the plain greedy fill. */
const GANG_SEEDS = 8;

/**
 * How a waiting gang could run by preemption (docs/gangs.md, "Preemption"): `size` distinct
 * machines, all of one GPU type and, with `sameLabel`, one value of it, none `unavailable` (held
 * for another stage, or taken by a gang this pass), on each of which a member fits now, or will
 * once room already leaving has gone, or once a set of victims is stopped (the same choice as one
 * stage's, `machineOption`). In each group the machines are taken cheapest first, one at a time,
 * each choice's victims counted as leaving for the next (a victim gang spanning two of them is
 * stopped, and costed, once), starting from the cheapest machine and again from the cheapest
 * machine that stops each victim gang (GANG_SEEDS of them); of all these sets, the least total
 * work lost, then the fewest victims, then the machines' names. Never partial: null when no group
 * can be made to take every member.
 */
export function chooseGangPreemption(
  stage: QueuedStage,
  gang: GangNeed,
  machines: readonly MachineView[],
  inputs: PreemptionInputs,
  unavailable: (m: MachineView) => boolean,
): GangPreemptionChoice | null {
  const index = indexRunning(inputs.running);
  type MachineChoice = { machine: MachineView; victims: RunningAttempt[]; loss: [number, number]; why: string | null };
  let best: { picks: MachineChoice[]; loss: [number, number]; victims: number; names: string } | null = null;
  // The groups placement takes a gang's machines from (gang-placer.ts), of the machines still available.
  for (const { need, idle: group } of groupsOf(
    gang,
    machines.filter((m) => !unavailable(m)),
    () => true,
  )) {
    if (group.length < gang.size) continue;
    const option = (m: MachineView, trial: PreemptionInputs): MachineChoice | null => {
      const o = firstReject(need, m) === null ? ({ kind: 'wait' } as const) : machineOption(stage, need, m, index, trial);
      if (o === null) return null;
      return o.kind === 'wait' ? { machine: m, victims: [], loss: [0, 0], why: null } : { machine: m, ...o };
    };
    const less = (x: MachineChoice, y: MachineChoice) => cheaper({ ...x, victims: x.victims.length }, { ...y, victims: y.victims.length });
    // Each machine's option before any choice; a choice changes only the options of the machines
    // its victims run on (a victim gang is taken whole, so each of its machines is among them),
    // so a fill asks again of those alone: a fill costs about one look at each machine.
    const first = new Map(group.map((m) => [m, option(m, inputs)]));
    /** Cheapest first, one machine at a time, from `seed` when given: each choice's victims are leaving for the next. */
    const fill = (seed: MachineChoice | null): MachineChoice[] | null => {
      const trial = { ...inputs, taken: new Set(inputs.taken) };
      const options = new Map(first);
      const picks: MachineChoice[] = [];
      while (picks.length < gang.size) {
        let next: MachineChoice | null = picks.length === 0 ? seed : null;
        if (next === null) for (const p of options.values()) if (p !== null && (next === null || less(p, next))) next = p;
        if (next === null) return null;
        options.delete(next.machine);
        picks.push(next);
        if (next.victims.length === 0) continue;
        for (const v of next.victims) trial.taken.add(v.attemptId);
        const touched = new Set(next.victims.map((v) => v.machineId));
        for (const m of options.keys()) if (touched.has(m.id)) options.set(m, option(m, trial));
      }
      return picks;
    };
    // Greedy alone misses a victim gang spanning several machines: its first machine costs the
    // whole gang, the others nothing after it. So the fill is tried also from the cheapest
    // machine that stops each such gang (the 8 cheapest gangs: a bounded number of fills).
    const seeds = new Map<string, MachineChoice>();
    for (const p of first.values()) {
      for (const v of p?.victims ?? []) {
        if (v.gang === undefined) continue;
        const s = seeds.get(v.gang.id);
        if (s === undefined || less(p!, s)) seeds.set(v.gang.id, p!);
      }
    }
    const gangSeeds = [...seeds.values()].sort((x, y) => (less(x, y) ? -1 : 1));
    for (const seed of [null, ...gangSeeds.slice(0, GANG_SEEDS)]) {
      const picks = fill(seed);
      if (picks === null) continue;
      const loss = sumLoss(picks.map((p) => p.loss));
      const victims = picks.reduce((n, p) => n + p.victims.length, 0);
      const names = picks
        .map((p) => p.machine.name)
        .sort()
        .join('\n');
      const byLoss = best === null ? -1 : compareLoss(loss, best.loss);
      if (best === null || byLoss < 0 || (byLoss === 0 && (victims < best.victims || (victims === best.victims && names < best.names)))) {
        best = { picks, loss, victims, names };
      }
    }
  }
  if (best === null) return null;
  const set = best.picks.map((p) => p.machine).sort(compareMachines);
  if (best.victims === 0) return { kind: 'wait', machines: set };
  const stops = best.picks.filter((p) => p.victims.length > 0).map((p) => ({ machine: p.machine, victims: p.victims, why: p.why! }));
  return { kind: 'preempt', machines: set, stops: stops.sort((a, b) => compareMachines(a.machine, b.machine)) };
}
