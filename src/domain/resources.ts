/** What one stage asks for, in the units the scheduler works in. */
export interface Resources {
  cpuMillis: number;
  memoryBytes: number;
  /**
   * GPUs on one machine; `types` empty means any type, several means any one of them. A share of
   * one GPU (issue 29, `gpu: {count: 0.25}`) is `count: 1` with `milli` below 1000.
   */
  gpu: {
    count: number;
    types: string[];
    /** Thousandths of each of its GPUs: absent or 1000 a whole GPU, 1–999 a share (then `count` is 1). */
    milli?: number;
    /** GPU memory it needs on each of its GPUs, bytes (`gpu: {memory: 10Gi}`); absent: no bound. */
    memoryBytes?: number;
  } | null;
  /**
   * A gang (issue 31, docs/gangs.md): the stage runs as this many members at once, each on its own
   * machine with the request above, placed all or nothing. Absent: 1, an ordinary stage (never
   * written as 1, so ordinary definitions and shapes stay what they were).
   */
  machines?: number;
}

/** How many machines the stage runs on at once: its gang's size, 1 for an ordinary stage. */
export function gangSizeOf(resources: Pick<Resources, 'machines'>): number {
  return resources.machines ?? 1;
}

/** Thousandths of a whole GPU (the Alibaba trace's `gpu_milli`). */
export const GPU_MILLI_WHOLE = 1000;

/** Thousandths of each GPU the request takes: 1000 for whole GPUs, below for a share, 0 without GPUs. */
export function gpuMilliOf(resources: Resources): number {
  const gpu = resources.gpu;
  if (!gpu || gpu.count === 0) return 0;
  return gpu.milli ?? GPU_MILLI_WHOLE;
}

/** The request's GPUs in thousandths, all together: count × milli (a quarter share 250, two whole GPUs 2000). */
export function gpuMilliTotalOf(resources: Resources): number {
  const gpu = resources.gpu;
  if (!gpu || gpu.count === 0) return 0;
  return gpu.count * gpuMilliOf(resources);
}

/**
 * Thousandths of one GPU that attempts hold, from the planner's view of it (free, and freeMilli
 * where shares are counted): 1000 held whole or shared to the full, 250 for a quarter, 0 idle.
 * What metrics, pools and the dashboard add up, so that a share counts as its part of a GPU.
 */
export function gpuMilliUsed(g: { free: boolean; freeMilli?: number }): number {
  return GPU_MILLI_WHOLE - gpuFreeMilli(g);
}

/** The GPU's free thousandths: `freeMilli`, or from `free` where the reader gave none (whole GPUs only). */
export function gpuFreeMilli(g: { free: boolean; freeMilli?: number }): number {
  return g.freeMilli ?? (g.free ? GPU_MILLI_WHOLE : 0);
}

/** Where a stage may run. */
export interface Placement {
  region: string | null;
  labels: Record<string, string>;
  /** A CPU stage may run on a machine with GPUs (never in the share kept for its free GPUs). Absent: false. */
  allowGpuMachines?: boolean;
  /** A gang's members all on machines with one value of this label key (one rack, one NVLink or IB domain). Absent: anywhere. Only on gangs. */
  sameLabel?: string;
}

/**
 * The queue a stage waits in. GPU stages wait per GPU type so they never queue behind CPU work
 * (or behind another type's); a stage that accepts several types, or any, waits in `gpu:any`.
 */
export function poolOf(resources: Resources): string {
  if (!resources.gpu || resources.gpu.count === 0) return 'cpu';
  return resources.gpu.types.length === 1 ? `gpu:${resources.gpu.types[0]}` : 'gpu:any';
}

/** Names already normalised: a cluster has a handful of GPU models, and the planner asks per GPU per check (issue 32's profile). */
const normalizedGpuTypes = new Map<string, string>();
/** Bound on the cache above: names come from agents, and a misbehaving one must not grow it without end. */
const NORMALIZED_GPU_TYPES_MAX = 1024;

/** GPU type names are compared case-insensitively ("H100" from nvidia-smi matches "h100"). */
export function normalizeGpuType(t: string): string {
  let n = normalizedGpuTypes.get(t);
  if (n === undefined) {
    n = t.trim().toLowerCase();
    if (normalizedGpuTypes.size < NORMALIZED_GPU_TYPES_MAX) normalizedGpuTypes.set(t, n);
  }
  return n;
}
