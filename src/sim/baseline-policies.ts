/**
 * Two textbook policies to compare Gantry's `planPlacements` with on a trace (`trace-replay.ts`
 * takes either as its `planner`). Both are pure `(snapshot, opts) => Plan` and use the real
 * placement core: `stageNeed`, the check chain of `checks.ts`, `bestCandidate` of `rank.ts`,
 * `takeAllocation`. What they leave out is what Gantry adds:
 *
 * - no priorities: arrival order (readySince, then stageId), QoS ignored;
 * - no reservations for waiting multi-GPU stages;
 * - no GPU-machine CPU reserve: CPU stages may take a GPU machine's CPUs like any machine's, so the
 *   chain runs without `checkGpuMachine` and `checkGpuShare` (the two checks that keep them).
 */
import { normalizeGpuType } from '../domain/resources.js';
import { checkGpuMachine, checkGpuShare, checks, fittingGpuTypes, isBusyReason, type RejectReason, type StageNeed, stageNeed } from '../scheduler/checks.js';
import { pendingReason, type MachineReject } from '../scheduler/pending-reason.js';
import { takeAllocation } from '../scheduler/placement-fit.js';
import { DEFAULT_CANDIDATE_LIMIT, DEFAULT_MAX_PLACEMENTS, type PlanOptions } from '../scheduler/plan-placements.js';
import { bestCandidate, candidatesOn, compareMachines, type Candidate } from '../scheduler/rank.js';
import type { MachineView, PendingStage, Plan, PlannedPlacement, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';

/** The real check chain, in its order, without the two checks that keep GPU machines' CPUs for GPU work. */
const plainChecks = checks.filter((c) => c !== checkGpuMachine && c !== checkGpuShare);

function plainReject(need: StageNeed, m: MachineView): RejectReason | null {
  for (const check of plainChecks) {
    const r = check(need, m);
    if (r !== null) return r;
  }
  return null;
}

/** Arrival order: readySince, then stageId. Priority is not looked at. */
export function compareArrival(a: QueuedStage, b: QueuedStage): number {
  return a.readySince - b.readySince || (a.stageId < b.stageId ? -1 : a.stageId > b.stageId ? 1 : 0);
}

interface Pass {
  machines: MachineView[];
  queue: QueuedStage[];
  maxPlacements: number;
  placements: PlannedPlacement[];
  pending: PendingStage[];
}

function startPass(snapshot: SchedulerSnapshot, opts: PlanOptions): Pass {
  return {
    // Working copies in name order: placements consume them, never the snapshot.
    machines: snapshot.machines.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) })).sort(compareMachines),
    queue: [...snapshot.queue].sort(compareArrival),
    maxPlacements: Math.floor(opts.maxPlacements ?? DEFAULT_MAX_PLACEMENTS),
    placements: [],
    pending: [],
  };
}

/** Places the stage on the candidate (the lowest free device indices of its type, as the planner does). */
function place(pass: Pass, stage: QueuedStage, need: StageNeed, c: Candidate): void {
  const gpuIndices =
    c.gpuType === null
      ? []
      : c.machine.gpus
          .filter((g) => g.free && normalizeGpuType(g.type) === c.gpuType)
          .map((g) => g.index)
          .sort((a, b) => a - b)
          .slice(0, need.gpuCount);
  const placement = { stageId: stage.stageId, machineId: c.machine.id, gpuIndices, cpuMillis: need.cpuMillis, memoryBytes: need.memoryBytes };
  takeAllocation(c.machine, placement);
  pass.placements.push(placement);
}

/** Why no machine takes it now; unplaceable when no machine would even when idle. */
function verdict(need: StageNeed, rejects: MachineReject[]): { reason: string; unplaceable: boolean } {
  return { reason: pendingReason(need, rejects), unplaceable: !rejects.some((r) => isBusyReason(r.reason)) };
}

/**
 * FIFO, first fit: stages in arrival order, each on the first machine in name order that fits it now
 * (its first fitting GPU type by name). Head-of-line blocking: when the oldest waiting stage fits
 * nowhere now, nothing behind it is placed in this pass. A stage no machine could run even idle
 * does not block: it would be refused or warned at submit (`never-placeable.ts`), and blocking on it
 * would measure a bad spec, not the policy.
 */
export function planFifo(snapshot: SchedulerSnapshot, opts: PlanOptions = {}): Plan {
  const pass = startPass(snapshot, opts);
  for (const [i, stage] of pass.queue.entries()) {
    if (pass.placements.length >= pass.maxPlacements) break;
    const need = stageNeed(stage);
    const rejects: MachineReject[] = [];
    const m = pass.machines.find((x) => {
      const reason = plainReject(need, x);
      if (reason !== null) rejects.push({ health: x.health, scheduling: x.scheduling, reason });
      return reason === null;
    });
    if (m !== undefined) {
      place(pass, stage, need, { machine: m, gpuType: need.gpuCount > 0 ? fittingGpuTypes(need, m)[0]! : null });
      continue;
    }
    const v = verdict(need, rejects);
    pass.pending.push({ stageId: stage.stageId, ...v });
    if (v.unplaceable) continue;
    const behind = `waits behind ${stage.stageId}, the oldest stage, which does not fit now (FIFO)`;
    for (const s of pass.queue.slice(i + 1)) pass.pending.push({ stageId: s.stageId, reason: behind, unplaceable: false });
    break;
  }
  return { placements: pass.placements, pending: pass.pending };
}

/**
 * Best fit in arrival order: stages in arrival order, a stage that fits nowhere now is skipped (no
 * head-of-line blocking), and each goes where `rank.ts` puts it: fewest GPUs of its type left, then
 * least CPU left (CPU stages: GPU-less machines first, then least CPU, then memory left). Like the
 * planner it stops scanning after `candidateLimit` feasible machines and remembers, within a pass,
 * the needs that fitted nowhere (capacity only shrinks, so an identical need cannot fit later).
 */
export function planBestFit(snapshot: SchedulerSnapshot, opts: PlanOptions = {}): Plan {
  const pass = startPass(snapshot, opts);
  const limit = Math.max(1, Math.floor(opts.candidateLimit ?? DEFAULT_CANDIDATE_LIMIT));
  const failed = new Map<string, { reason: string; unplaceable: boolean }>();
  for (const stage of pass.queue) {
    if (pass.placements.length >= pass.maxPlacements) break;
    const need = stageNeed(stage);
    const key = JSON.stringify(need);
    const known = failed.get(key);
    if (known !== undefined) {
      pass.pending.push({ stageId: stage.stageId, ...known });
      continue;
    }
    const candidates: Candidate[] = [];
    const rejects: MachineReject[] = [];
    let found = 0;
    for (const m of pass.machines) {
      if (found >= limit) break;
      const reason = plainReject(need, m);
      if (reason === null) {
        found += 1;
        candidates.push(...candidatesOn(need, m));
      } else {
        rejects.push({ health: m.health, scheduling: m.scheduling, reason });
      }
    }
    const best = bestCandidate(need, candidates);
    if (best !== undefined) {
      place(pass, stage, need, best);
      continue;
    }
    const v = verdict(need, rejects);
    failed.set(key, v);
    pass.pending.push({ stageId: stage.stageId, ...v });
  }
  return { placements: pass.placements, pending: pass.pending };
}
