/** What one stage asks for, in the units the scheduler works in. */
export interface Resources {
  cpuMillis: number;
  memoryBytes: number;
  /** GPUs on one machine; `types` empty means any type, several means any one of them. */
  gpu: { count: number; types: string[] } | null;
}

/** Where a stage may run. */
export interface Placement {
  region: string | null;
  labels: Record<string, string>;
  /** A CPU stage may run on a machine with GPUs (never in the share kept for its free GPUs). Absent: false. */
  allowGpuMachines?: boolean;
}

/**
 * The queue a stage waits in. GPU stages wait per GPU type so they never queue behind CPU work
 * (or behind another type's); a stage that accepts several types, or any, waits in `gpu:any`.
 */
export function poolOf(resources: Resources): string {
  if (!resources.gpu || resources.gpu.count === 0) return 'cpu';
  return resources.gpu.types.length === 1 ? `gpu:${resources.gpu.types[0]}` : 'gpu:any';
}

/** GPU type names are compared case-insensitively ("H100" from nvidia-smi matches "h100"). */
export function normalizeGpuType(t: string): string {
  return t.trim().toLowerCase();
}
