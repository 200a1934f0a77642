import { firstReject, isBusyReason, type StageNeed } from './checks.js';
import { GPU_MILLI_WHOLE } from '../domain/resources.js';
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
 * `firstReject` judges the freed copy either way.
 */
export function choosePreemption(stage: QueuedStage, need: StageNeed, machines: readonly MachineView[], inputs: PreemptionInputs): PreemptionChoice | null {
  const byMachine = new Map<string, RunningAttempt[]>();
  for (const a of inputs.running) {
    const list = byMachine.get(a.machineId) ?? [];
    list.push(a);
    byMachine.set(a.machineId, list);
  }
  const eligible = machines.filter((m) => {
    if (inputs.held.has(m.id)) return false;
    const r = firstReject(need, m);
    return r !== null && isBusyReason(r);
  });
  // Room already on its way: attempts the server has ended whose agents are killing them.
  for (const m of eligible) {
    const leaving = (byMachine.get(m.id) ?? []).filter((a) => a.leaving || inputs.taken.has(a.attemptId));
    if (leaving.length === 0) continue;
    const copy = copyOf(m);
    for (const a of leaving) releaseAllocation(copy, a);
    if (firstReject(need, copy) === null) return { kind: 'wait', machine: m };
  }
  let best: { machine: MachineView; victims: RunningAttempt[]; loss: [number, number]; why: string } | null = null;
  for (const m of eligible) {
    const here = byMachine.get(m.id) ?? [];
    const copy = copyOf(m);
    for (const a of here) if (a.leaving || inputs.taken.has(a.attemptId)) releaseAllocation(copy, a);
    const pool = here
      .map((a) => ({ a, why: victimReason(stage, a, inputs), loss: lostWork(a, inputs.now) }))
      .filter((v): v is { a: RunningAttempt; why: string; loss: [number, number] } => v.why !== null)
      .sort((x, y) => compareLoss(x.loss, y.loss) || x.a.priority - y.a.priority || y.a.startedAt - x.a.startedAt || (x.a.attemptId < y.a.attemptId ? -1 : 1));
    const chosen: typeof pool = [];
    for (const v of pool) {
      if (firstReject(need, copy) === null) break;
      releaseAllocation(copy, v.a);
      chosen.push(v);
    }
    if (firstReject(need, copy) !== null) continue;
    // Prune: the greedy set may hold a victim the others make unnecessary (the dearest first).
    for (let i = chosen.length - 1; i >= 0; i--) {
      const v = chosen[i]!;
      const trial = copyOf(copy);
      // Put it back (only what it holds: a share its thousandths): is the stage still placed?
      takeAllocation(trial, v.a);
      if (firstReject(need, trial) === null) {
        chosen.splice(i, 1);
        Object.assign(copy, { cpuMillisFree: trial.cpuMillisFree, memoryBytesFree: trial.memoryBytesFree, gpus: trial.gpus });
      }
    }
    const loss = chosen.reduce<[number, number]>((s, v) => [s[0] + v.loss[0], s[1] + v.loss[1]], [0, 0]);
    const better =
      best === null ||
      compareLoss(loss, best.loss) < 0 ||
      (compareLoss(loss, best.loss) === 0 &&
        (chosen.length < best.victims.length || (chosen.length === best.victims.length && compareMachines(m, best.machine) < 0)));
    if (better) best = { machine: m, victims: chosen.map((v) => v.a), loss, why: chosen[0]!.why };
  }
  return best ? { kind: 'preempt', machine: best.machine, victims: best.victims, why: best.why } : null;
}
