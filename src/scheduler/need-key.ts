import type { StageNeed } from './checks.js';

/**
 * A need as one text: identical needs get identical outcomes within a pass (capacity only
 * shrinks), so the planner remembers a failed shape by it, and machines' static verdicts are kept
 * per need by it (`StaticClasses`).
 */
export function needKey(need: StageNeed): string {
  const labels = Object.entries(need.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([
    need.cpuMillis,
    need.memoryBytes,
    need.gpuCount,
    need.gpuMilli,
    need.gpuMemoryBytes,
    need.gpuTypes,
    need.region,
    labels,
    need.allowGpuMachines,
  ]);
}
