import { fittingGpuTypes, gpuCountsByType, type StageNeed } from './checks.js';
import type { MachineView } from './snapshot.js';

/** A feasible place for a stage: a machine and, for GPU stages, the one GPU type to use there. */
export interface Candidate {
  machine: MachineView;
  gpuType: string | null;
}

/** All feasible (machine, type) pairs on a machine that already passed every check. */
export function candidatesOn(need: StageNeed, machine: MachineView): Candidate[] {
  if (need.gpuCount === 0) return [{ machine, gpuType: null }];
  return fittingGpuTypes(need, machine).map((gpuType) => ({ machine, gpuType }));
}

function fraction(left: number, total: number): number {
  return total > 0 ? left / total : 0;
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Machine order for scans and ties: name, then id. */
export function compareMachines(a: MachineView, b: MachineView): number {
  return compareStrings(a.name, b.name) || compareStrings(a.id, b.id);
}

/** CPU-only stages: machines without GPUs first (0), so GPU machines keep their CPUs for GPU work. */
export function cpuStageTier(machine: MachineView): 0 | 1 {
  return machine.gpus.length === 0 ? 0 : 1;
}

/**
 * Best fit, lower is better. GPU stage: fewest free GPUs of the chosen type left, then least free
 * CPU fraction left, then machine name/id, then type name. CPU stage: machines without GPUs first,
 * then least free CPU fraction left, then least free memory fraction left, then name/id.
 */
export function compareCandidates(need: StageNeed, a: Candidate, b: Candidate): number {
  // Plain functions of (need, candidate), not closures made per comparison: a pass compares
  // thousands of candidates (docs/throughput.md, "Placement at scale").
  if (need.gpuCount > 0) {
    return (
      gpuLeft(need, a) - gpuLeft(need, b) ||
      cpuLeft(need, a.machine) - cpuLeft(need, b.machine) ||
      compareMachines(a.machine, b.machine) ||
      compareStrings(a.gpuType ?? '', b.gpuType ?? '')
    );
  }
  return compareCpuFits(need, a.machine, b.machine);
}

/**
 * `compareCandidates` for a CPU stage, on the machines themselves: the pass finds a CPU stage's
 * best fit as it looks, without a candidate object per machine that fits (up to 64 a stage).
 */
export function compareCpuFits(need: StageNeed, a: MachineView, b: MachineView): number {
  return cpuStageTier(a) - cpuStageTier(b) || cpuLeft(need, a) - cpuLeft(need, b) || memLeft(need, a) - memLeft(need, b) || compareMachines(a, b);
}

const cpuLeft = (need: StageNeed, m: MachineView) => fraction(m.cpuMillisFree - need.cpuMillis, m.cpuMillisTotal);
const memLeft = (need: StageNeed, m: MachineView) => fraction(m.memoryBytesFree - need.memoryBytes, m.memoryBytesTotal);
const gpuLeft = (need: StageNeed, c: Candidate) => (gpuCountsByType(need, c.machine).get(c.gpuType ?? '')?.free ?? 0) - need.gpuCount;

export function bestCandidate(need: StageNeed, candidates: readonly Candidate[]): Candidate | undefined {
  let best: Candidate | undefined;
  for (const c of candidates) if (best === undefined || compareCandidates(need, c, best) < 0) best = c;
  return best;
}
