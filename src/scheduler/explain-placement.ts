import { formatCpu, formatMemory } from '../spec/quantity.js';
import { firstReject, RejectReason, type StageNeed } from './checks.js';
import { describeGpus, describeNeedGpus, machineReject, pendingReason } from './pending-reason.js';
import type { MachineView } from './snapshot.js';

/** One step of the funnel: how many machines are left after this constraint. */
export interface FunnelStep {
  /** The constraint, in words: "in region us-east", "with 2 free h100 GPUs now". */
  step: string;
  /** The RejectReason a machine dropped here has. */
  reason: RejectReason;
  /** Machines still in after this step. */
  machines: number;
}

export interface PlacementExplanation {
  /** Null when some machine has room now (the next pass places it); else the one-line reason. */
  reason: string | null;
  /** Machines registered, then what is left after each constraint, in the order the checks run. */
  registered: number;
  funnel: FunnelStep[];
  /** Changes to the stage, each of which alone would let some machine run it now; smallest first. */
  suggestions: string[];
}

function stepName(need: StageNeed, reason: RejectReason): string {
  switch (reason) {
    case RejectReason.notReady:
    case RejectReason.notEligible:
      return 'ready and in service (not suspect, lost, cordoned or draining)';
    case RejectReason.region:
      return `in region ${need.region}`;
    case RejectReason.labels:
      return `with labels ${Object.entries(need.labels)
        .map(([k, v]) => `${k}=${v}`)
        .sort()
        .join(',')}`;
    case RejectReason.gpuType:
      return need.gpuTypes.length ? `with ${need.gpuTypes.join(' or ')} GPUs` : 'with GPUs';
    case RejectReason.gpuTotal:
      return `with ${describeGpus(need.gpuCount, need.gpuTypes)} in all`;
    case RejectReason.gpuMemory:
      return `with ${describeGpus(need.gpuCount, need.gpuTypes)} of ${formatMemory(need.gpuMemoryBytes ?? 0)} memory or more (known)`;
    case RejectReason.cpuTotal:
      return `with ${formatCpu(need.cpuMillis)} CPU in all`;
    case RejectReason.memoryTotal:
      return `with ${formatMemory(need.memoryBytes)} memory in all`;
    case RejectReason.gpuMachine:
      return 'without GPUs (a CPU stage; placement.allowGpuMachines not set)';
    case RejectReason.gpuBusy:
      return need.gpuMilli > 0 && need.gpuMilli < 1000 ? `with a ${describeNeedGpus(need, true)} now` : `with ${describeNeedGpus(need, true)} now`;
    case RejectReason.cpuBusy:
      return `with ${formatCpu(need.cpuMillis)} CPU free now`;
    case RejectReason.memoryBusy:
      return `with ${formatMemory(need.memoryBytes)} memory free now`;
    case RejectReason.gpuShare:
      return "with that much free beyond their free GPUs' share";
  }
}

/**
 * Why a ready stage is not running, in numbers (`gantry explain`): the machines registered, how
 * many are left after each constraint in the order the scheduler checks them, the binding reason,
 * and the changes to the stage that would each let some machine run it now. Pure: the cluster
 * as the caller read it.
 */
export function explainPlacement(need: StageNeed, machines: readonly MachineView[]): PlacementExplanation {
  // Each machine's first failing check (null: it fits now) puts it out at that step of the funnel.
  const outAt = machines.map((m) => firstReject(need, m));
  const funnel: FunnelStep[] = [];
  let left = machines.length;
  // One step per reason, in the order the checks run (RejectReason is declared in that order);
  // not-ready and not-eligible, both the first check's, are one step.
  for (const reason of Object.values(RejectReason)) {
    if (reason === RejectReason.notEligible) continue;
    const dropped = outAt.filter((r) => r === reason || (reason === RejectReason.notReady && r === RejectReason.notEligible)).length;
    // A step nobody was dropped at, and that the stage does not ask about, says nothing: left out.
    if (dropped === 0 && !asks(need, reason)) continue;
    left -= dropped;
    funnel.push({ step: stepName(need, reason), reason, machines: left });
  }
  // The binding reason from the same verdicts (pendingReasonNow would ask every machine again).
  const reason = outAt.includes(null)
    ? null
    : pendingReason(
        need,
        machines.map((m, i) => machineReject(m, outAt[i]!)),
      );
  return { reason, registered: machines.length, funnel, suggestions: reason === null ? [] : suggestions(need, machines) };
}

/** Whether the stage's request involves this constraint (so its step is worth showing with no drop). */
function asks(need: StageNeed, reason: RejectReason): boolean {
  switch (reason) {
    case RejectReason.region:
      return need.region !== null;
    case RejectReason.labels:
      return Object.keys(need.labels).length > 0;
    case RejectReason.gpuType:
    case RejectReason.gpuTotal:
    case RejectReason.gpuBusy:
      return need.gpuCount > 0;
    case RejectReason.gpuMemory:
      return need.gpuCount > 0 && need.gpuMemoryBytes !== null;
    case RejectReason.gpuMachine:
    case RejectReason.gpuShare:
      return false;
    default:
      return true;
  }
}

const fitsNow = (need: StageNeed, machines: readonly MachineView[]) => machines.filter((m) => firstReject(need, m) === null).length;

/** Each single change that would make some machine fit the stage now, smallest first. */
function suggestions(need: StageNeed, machines: readonly MachineView[]): string[] {
  const out: string[] = [];
  const tryChange = (label: string, changed: StageNeed) => {
    const n = fitsNow(changed, machines);
    if (n > 0) out.push(`${label}: ${n} ${n === 1 ? 'machine' : 'machines'} could run it now`);
  };
  if (need.gpuCount > 1) {
    // The most GPUs of an acceptable type free on one machine that passes the rest.
    for (let c = need.gpuCount - 1; c >= 1; c--) {
      if (fitsNow({ ...need, gpuCount: c }, machines) > 0) {
        tryChange(`ask for ${c} GPU${c === 1 ? '' : 's'} instead of ${need.gpuCount}`, { ...need, gpuCount: c });
        break;
      }
    }
  }
  if (need.gpuCount > 0 && need.gpuMemoryBytes !== null)
    tryChange(`drop the GPU memory bound (${formatMemory(need.gpuMemoryBytes)})`, { ...need, gpuMemoryBytes: null });
  if (need.gpuCount > 0 && need.gpuTypes.length > 0) tryChange(`accept any GPU type (not only ${need.gpuTypes.join(' or ')})`, { ...need, gpuTypes: [] });
  for (const [k, v] of Object.entries(need.labels)) {
    const labels = { ...need.labels };
    delete labels[k];
    tryChange(`drop label ${k}=${v}`, { ...need, labels });
  }
  if (need.region !== null) tryChange(`drop region ${need.region}`, { ...need, region: null });
  if (need.gpuCount === 0 && !need.allowGpuMachines) tryChange('set placement.allowGpuMachines: true', { ...need, allowGpuMachines: true });
  const candidates = machines.filter((m) => {
    const r = firstReject(need, m);
    return r === RejectReason.cpuBusy || r === RejectReason.memoryBusy;
  });
  if (candidates.length > 0) {
    const cpu = Math.max(...candidates.map((m) => m.cpuMillisFree));
    const mem = Math.max(...candidates.map((m) => m.memoryBytesFree));
    if (cpu > 0 && cpu < need.cpuMillis) tryChange(`ask for ${formatCpu(cpu)} CPU instead of ${formatCpu(need.cpuMillis)}`, { ...need, cpuMillis: cpu });
    if (mem > 0 && mem < need.memoryBytes)
      tryChange(`ask for ${formatMemory(mem)} memory instead of ${formatMemory(need.memoryBytes)}`, { ...need, memoryBytes: mem });
  }
  return out;
}
