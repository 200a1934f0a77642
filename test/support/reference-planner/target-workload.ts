// Frozen copy of src/scheduler/target-workload.ts as of ebf6444, before the placement-at-scale work (issue 32):
// the reference planner-equivalence.test.ts and bench:placement compare the planner with. Test-only; never edit to follow src.
import type { ShareRequest } from '../../../src/scheduler/gpu-share.js';

/**
 * The work that typically arrives, as FGD measures fragmentation against it (docs/scheduling.md,
 * "FGD"): request shapes, each with the share of requests that had it. Memory is not part of a
 * shape, as in the paper: its fragmentation is of GPUs, and CPU is what strands them most.
 */
export interface WorkloadShape {
  cpuMillis: number;
  gpuCount: number;
  gpuMilli: number;
  gpuTypes: readonly string[];
  /** How many of the requests had this shape. */
  count: number;
  /** count / the workload's `requests`: the shapes' weights add up to 1. */
  weight: number;
}

export interface TargetWorkload {
  shapes: readonly WorkloadShape[];
  /** The requests of the kept shapes: FGD sums count × thousandths, exact integers, and divides once by it. */
  requests: number;
}

/** The paper's default: the most popular shapes that together make 95% of the requests. */
export const DEFAULT_WORKLOAD_POPULARITY = 0.95;

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The target workload of a list of requests (CPU-only ones included): shapes by popularity, the
 * most popular first, kept until they make `popularity` of the requests, weights renormalised.
 * Among equally popular shapes the larger comes first (CPU, then thousandths, count, types), as
 * the paper's simulator sorts them, so the cut at the threshold is deterministic.
 */
export function targetWorkload(requests: readonly ShareRequest[], popularity: number = DEFAULT_WORKLOAD_POPULARITY): TargetWorkload {
  if (!(popularity > 0 && popularity <= 1)) throw new Error(`popularity must be in (0, 1], got ${popularity}`);
  const counts = new Map<string, { shape: Omit<WorkloadShape, 'weight' | 'count'>; count: number }>();
  for (const r of requests) {
    const types = [...r.gpuTypes].sort();
    const key = `${r.cpuMillis}|${r.gpuCount}|${r.gpuMilli}|${types.join(',')}`;
    const c = counts.get(key);
    if (c !== undefined) c.count += 1;
    else counts.set(key, { shape: { cpuMillis: r.cpuMillis, gpuCount: r.gpuCount, gpuMilli: r.gpuMilli, gpuTypes: types }, count: 1 });
  }
  const ranked = [...counts.values()].sort(
    (a, b) =>
      b.count - a.count ||
      b.shape.cpuMillis - a.shape.cpuMillis ||
      b.shape.gpuMilli - a.shape.gpuMilli ||
      b.shape.gpuCount - a.shape.gpuCount ||
      compareText(b.shape.gpuTypes.join(','), a.shape.gpuTypes.join(',')),
  );
  const wanted = popularity * requests.length;
  const kept: typeof ranked = [];
  let cum = 0;
  for (const c of ranked) {
    if (cum >= wanted) break;
    kept.push(c);
    cum += c.count;
  }
  return { shapes: kept.map((c) => ({ ...c.shape, count: c.count, weight: c.count / cum })), requests: cum };
}
