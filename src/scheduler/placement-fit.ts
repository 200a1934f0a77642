import { normalizeGpuType } from '../domain/resources.js';
import { acceptsGpuType, type StageNeed } from './checks.js';
import type { MachineView } from './snapshot.js';

/** What one placement takes from a machine: CPU, memory and exact GPU devices. */
export interface Allocation {
  cpuMillis: number;
  memoryBytes: number;
  gpuIndices: readonly number[];
}

/**
 * The one answer to "does this exact allocation fit on this machine now": enough free CPU and
 * memory, and every named GPU present, free, named once, all of one type (acceptable to the stage
 * when its need is given). The planner's choices, the store's re-check of a plan against fresh
 * state, and the trace replay all ask it. Null when it fits, else why not.
 */
export function allocationProblem(m: MachineView, a: Allocation, need?: StageNeed): string | null {
  if (a.cpuMillis > m.cpuMillisFree) return `needs ${a.cpuMillis} CPU millis, ${m.cpuMillisFree} free`;
  if (a.memoryBytes > m.memoryBytesFree) return `needs ${a.memoryBytes} memory bytes, ${m.memoryBytesFree} free`;
  if (need && a.gpuIndices.length !== need.gpuCount) return `${a.gpuIndices.length} GPUs for a ${need.gpuCount}-GPU stage`;
  if (new Set(a.gpuIndices).size !== a.gpuIndices.length) return 'a GPU index twice';
  const types = new Set<string>();
  for (const i of a.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i);
    if (g === undefined) return `no GPU ${i}`;
    if (!g.free) return `GPU ${i} already allocated`;
    if (need && !acceptsGpuType(need, g.type)) return `GPU ${i} is ${g.type}, wants ${need.gpuTypes.join('|')}`;
    types.add(normalizeGpuType(g.type));
  }
  if (types.size > 1) return `mixed GPU types ${[...types].join(', ')}`;
  return null;
}

/** Takes an allocation that fits (check allocationProblem first) from the machine's free room. */
export function takeAllocation(m: MachineView, a: Allocation): void {
  for (const i of a.gpuIndices) m.gpus.find((x) => x.index === i)!.free = false;
  m.cpuMillisFree -= a.cpuMillis;
  m.memoryBytesFree -= a.memoryBytes;
}

/** Gives an allocation back; throws when the machine does not hold one of its GPUs (a caller's bug). */
export function releaseAllocation(m: MachineView, a: Allocation): void {
  for (const i of a.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i);
    if (g === undefined || g.free) throw new Error(`releases GPU ${i} on ${m.id}, which is not allocated`);
    g.free = true;
  }
  m.cpuMillisFree += a.cpuMillis;
  m.memoryBytesFree += a.memoryBytes;
}
