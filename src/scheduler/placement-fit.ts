import { GPU_MILLI_WHOLE, gpuFreeMilli, normalizeGpuType } from '../domain/resources.js';
import { acceptsGpuType, type StageNeed } from './checks.js';
import type { GpuView, MachineView } from './snapshot.js';

/** What one placement takes from a machine: CPU, memory and exact GPU devices, or a share of one. */
export interface Allocation {
  cpuMillis: number;
  memoryBytes: number;
  gpuIndices: readonly number[];
  /** Thousandths of each GPU (absent: 1000, whole GPUs). */
  gpuMilli?: number;
  /** GPU memory a share holds on its GPU, bytes (absent: none bounded). */
  gpuMemoryBytes?: number;
}

const milliOf = (a: Pick<Allocation, 'gpuMilli'>) => a.gpuMilli ?? GPU_MILLI_WHOLE;
const isShare = (a: Pick<Allocation, 'gpuMilli'>) => milliOf(a) < GPU_MILLI_WHOLE;
const memoryFree = (g: GpuView) => g.memoryBytesFree ?? g.memoryBytesTotal ?? null;

/**
 * The one answer to "does this exact allocation fit on this machine now": enough free CPU and
 * memory, and every named GPU present, named once, all of one type (acceptable to the stage when
 * its need is given), and free for it: idle (1000 thousandths free) for a whole GPU, which never
 * shares; room for its thousandths, and for its GPU memory bound where it has one, for a share
 * (docs/scheduling.md, "Shares of a GPU and fragmentation"). The planner's choices, the store's
 * re-check of a plan against fresh state, and the trace replay all ask it. Null when it fits,
 * else why not.
 */
export function allocationProblem(m: MachineView, a: Allocation, need?: StageNeed): string | null {
  if (a.cpuMillis > m.cpuMillisFree) return `needs ${a.cpuMillis} CPU millis, ${m.cpuMillisFree} free`;
  if (a.memoryBytes > m.memoryBytesFree) return `needs ${a.memoryBytes} memory bytes, ${m.memoryBytesFree} free`;
  if (need && a.gpuIndices.length !== need.gpuCount) return `${a.gpuIndices.length} GPUs for a ${need.gpuCount}-GPU stage`;
  const milli = milliOf(a);
  if (!Number.isInteger(milli) || milli < 1 || milli > GPU_MILLI_WHOLE) return `GPU share ${milli} is not 1–1000 thousandths`;
  if (isShare(a) && a.gpuIndices.length !== 1) return `a share is of one GPU, not ${a.gpuIndices.length}`;
  if (new Set(a.gpuIndices).size !== a.gpuIndices.length) return 'a GPU index twice';
  const types = new Set<string>();
  for (const i of a.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i);
    if (g === undefined) return `no GPU ${i}`;
    const free = gpuFreeMilli(g);
    if (!isShare(a) && free !== GPU_MILLI_WHOLE) return free === 0 ? `GPU ${i} already allocated` : `GPU ${i} holds shares (${free} of 1000 free)`;
    if (free < milli) return `GPU ${i} has ${free} thousandths free, needs ${milli}`;
    if (need && !acceptsGpuType(need, g.type)) return `GPU ${i} is ${g.type}, wants ${need.gpuTypes.join('|')}`;
    const bound = a.gpuMemoryBytes ?? need?.gpuMemoryBytes ?? null;
    if (bound !== null && bound > 0) {
      const have = isShare(a) ? memoryFree(g) : (g.memoryBytesTotal ?? null);
      if (have === null) return `GPU ${i} memory unknown, needs ${bound} bytes`;
      if (have < bound) return `GPU ${i} has ${have} memory bytes ${isShare(a) ? 'free' : 'in all'}, needs ${bound}`;
    }
    types.add(normalizeGpuType(g.type));
  }
  if (types.size > 1) return `mixed GPU types ${[...types].join(', ')}`;
  return null;
}

/** Takes an allocation that fits (check allocationProblem first) from the machine's free room. */
export function takeAllocation(m: MachineView, a: Allocation): void {
  for (const i of a.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i)!;
    g.freeMilli = gpuFreeMilli(g) - milliOf(a);
    g.free = false;
    const mem = memoryFree(g);
    if (isShare(a) && a.gpuMemoryBytes !== undefined && mem !== null) g.memoryBytesFree = mem - a.gpuMemoryBytes;
  }
  m.cpuMillisFree -= a.cpuMillis;
  m.memoryBytesFree -= a.memoryBytes;
}

/**
 * Gives an allocation back: only what it held (a share frees its thousandths and memory, not the
 * GPU). Throws when the machine does not hold that much of one of its GPUs (a caller's bug).
 */
export function releaseAllocation(m: MachineView, a: Allocation): void {
  for (const i of a.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i);
    const held = g === undefined ? 0 : GPU_MILLI_WHOLE - gpuFreeMilli(g);
    if (g === undefined || held < milliOf(a)) throw new Error(`releases ${milliOf(a)} thousandths of GPU ${i} on ${m.id}, which holds ${held}`);
    g.freeMilli = gpuFreeMilli(g) + milliOf(a);
    g.free = g.freeMilli === GPU_MILLI_WHOLE;
    const mem = memoryFree(g);
    if (isShare(a) && a.gpuMemoryBytes !== undefined && mem !== null) g.memoryBytesFree = mem + a.gpuMemoryBytes;
  }
  m.cpuMillisFree += a.cpuMillis;
  m.memoryBytesFree += a.memoryBytes;
}
