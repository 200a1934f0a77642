import { acceptsShareType, type ShareGpu, type ShareMachine, type ShareRequest } from './gpu-share.js';
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

/** The workload's shapes as a machine with these GPU types sees them. */
interface ShapesFor {
  /** Count of the shapes that can use none of its GPUs (CPU-only ones, other types): all free thousandths count for them. */
  always: number;
  /** The others. */
  shapes: readonly WorkloadShape[];
  /** GPUs of more than one type: acceptance is checked per GPU. */
  mixed: boolean;
}

/** Per workload, per GPU type list: the shapes that matter there. */
const shapesCache = new WeakMap<TargetWorkload, Map<string, ShapesFor>>();
/** The same by a machine's GPU list (a machine's GPU types do not change), to skip building the key. */
const byGpuList = new WeakMap<TargetWorkload, WeakMap<readonly ShareGpu[], ShapesFor>>();

function shapesFor(w: TargetWorkload, gpuTypes: readonly string[]): ShapesFor {
  let byTypes = shapesCache.get(w);
  if (byTypes === undefined) shapesCache.set(w, (byTypes = new Map()));
  const key = gpuTypes.join(',');
  let out = byTypes.get(key);
  if (out === undefined) {
    let always = 0;
    const shapes: WorkloadShape[] = [];
    for (const s of w.shapes) {
      if (s.gpuCount > 0 && gpuTypes.some((t) => acceptsShareType(s, t))) shapes.push(s);
      else always += s.count;
    }
    out = { always, shapes, mixed: new Set(gpuTypes).size > 1 };
    byTypes.set(key, out);
  }
  return out;
}

function shapesOn(w: TargetWorkload, gpus: readonly ShareGpu[]): ShapesFor {
  let byList = byGpuList.get(w);
  if (byList === undefined) byGpuList.set(w, (byList = new WeakMap()));
  let out = byList.get(gpus);
  if (out === undefined) {
    out = shapesFor(
      w,
      gpus.map((g) => g.type),
    );
    byList.set(gpus, out);
  }
  return out;
}

/**
 * F in whole units: Σ count(s) × `shapeFragmentation`(s), an integer (counts × thousandths stay far
 * below 2^53), so equal increases compare equal and ties go to the tie-break, not to rounding
 * noise. The hot loop of FGD: shapes that can use none of the GPUs are summed once.
 */
function fragmentationUnits(cpuFree: number, gpuFree: ArrayLike<number>, gpus: readonly ShareGpu[], sf: ShapesFor): number {
  let total = 0;
  for (let i = 0; i < gpuFree.length; i++) total += gpuFree[i]!;
  let f = sf.always * total;
  for (const s of sf.shapes) {
    if (cpuFree < s.cpuMillis) {
      f += s.count * total;
      continue;
    }
    let usable = 0;
    let fitting = 0;
    for (let i = 0; i < gpuFree.length; i++) {
      const free = gpuFree[i]!;
      if (free >= s.gpuMilli && (!sf.mixed || acceptsShareType(s, gpus[i]!.type))) {
        fitting += 1;
        usable += free;
      }
    }
    f += s.count * (fitting >= s.gpuCount ? total - usable : total);
  }
  return f;
}

/** F(m) in whole units (count × thousandths), for a caller that keeps it between scores. */
export function machineFragmentationUnits(m: ShareMachine, w: TargetWorkload): number {
  return fragmentationUnits(
    m.cpuMillisFree,
    m.gpus.map((g) => g.freeMilli),
    m.gpus,
    shapesOn(w, m.gpus),
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
  const sf = shapesOn(w, m.gpus);
  const free = m.gpus.map((g) => g.freeMilli);
  const f0 = beforeUnits ?? fragmentationUnits(m.cpuMillisFree, free, m.gpus, sf);
  for (const i of gpuIndices) {
    const at = m.gpus.findIndex((g) => g.index === i);
    free[at] = free[at]! - r.gpuMilli;
  }
  return (fragmentationUnits(m.cpuMillisFree - r.cpuMillis, free, m.gpus, sf) - f0) / w.requests;
}

/**
 * FGD's points for an increase, as the paper scores a node: 100 × sigmoid(−increase / 1000),
 * truncated to an integer (higher is better). Increases within about 40 thousandths of each other
 * near zero get the same points, and the tie-break (best fit) decides among them: on the trace that
 * strands fewer GPUs than ranking by the exact increase (docs/scheduling.md, "FGD").
 */
export function fgdPoints(increase: number): number {
  return Math.trunc(100 / (1 + Math.exp(increase / 1000)));
}
