import { acceptsShareType, type ShareMachine, type ShareRequest } from './gpu-share.js';
import type { TargetWorkload, WorkloadShape } from './target-workload.js';

/**
 * FGD (Weng et al., USENIX ATC '23; docs/scheduling.md, "FGD: the expected fragmentation for the
 * work that arrives"): how many free GPU thousandths on a machine the expected next request could
 * not use, and how much a placement adds to that. Pure.
 */

/**
 * One shape's fragmentation of a machine state, in GPU thousandths: when the shape fits (CPU, and
 * enough acceptable GPUs with room for its thousandths), the free thousandths it could not use;
 * otherwise all free thousandths. A CPU-only shape uses no GPU, so all of them.
 */
export function shapeFragmentation(
  cpuFree: number,
  gpuFree: ArrayLike<number>,
  gpuTypes: readonly string[],
  s: Omit<WorkloadShape, 'weight' | 'count'>,
): number {
  let total = 0;
  let usable = 0;
  let fitting = 0;
  for (let i = 0; i < gpuFree.length; i++) {
    const free = gpuFree[i]!;
    total += free;
    if (s.gpuCount > 0 && free >= s.gpuMilli && acceptsShareType(s, gpuTypes[i]!)) {
      fitting += 1;
      usable += free;
    }
  }
  return s.gpuCount > 0 && cpuFree >= s.cpuMillis && fitting >= s.gpuCount ? total - usable : total;
}

/**
 * F in whole units: Σ count(s) × fragmentation(s), an integer (counts × thousandths stay far below
 * 2^53), so equal increases compare equal and ties go to the tie-break, not to rounding noise.
 */
function fragmentationUnits(cpuFree: number, gpuFree: ArrayLike<number>, gpuTypes: readonly string[], w: TargetWorkload): number {
  let f = 0;
  for (const s of w.shapes) f += s.count * shapeFragmentation(cpuFree, gpuFree, gpuTypes, s);
  return f;
}

/** F(m) in whole units (count × thousandths), for a caller that keeps it between scores. */
export function machineFragmentationUnits(m: ShareMachine, w: TargetWorkload): number {
  return fragmentationUnits(
    m.cpuMillisFree,
    m.gpus.map((g) => g.freeMilli),
    m.gpus.map((g) => g.type),
    w,
  );
}

/** F(m): the free GPU thousandths of `m` the target workload's next request could not use, in expectation. */
export function machineFragmentation(m: ShareMachine, w: TargetWorkload): number {
  return machineFragmentationUnits(m, w) / w.requests;
}

/**
 * FGD's score: F(m after) − F(m before) for the request on `gpuIndices` (a choice of `gpuChoices`),
 * the increase of the cluster's expected fragmentation (no other machine changes), in GPU
 * thousandths. Lower is better. `beforeUnits` (`machineFragmentationUnits` now) may be passed when
 * known, to save its computation.
 */
export function fragmentationIncrease(m: ShareMachine, r: ShareRequest, gpuIndices: readonly number[], w: TargetWorkload, beforeUnits?: number): number {
  const free = m.gpus.map((g) => g.freeMilli);
  const types = m.gpus.map((g) => g.type);
  const f0 = beforeUnits ?? fragmentationUnits(m.cpuMillisFree, free, types, w);
  for (const i of gpuIndices) {
    const at = m.gpus.findIndex((g) => g.index === i);
    free[at] = free[at]! - r.gpuMilli;
  }
  return (fragmentationUnits(m.cpuMillisFree - r.cpuMillis, free, types, w) - f0) / w.requests;
}
