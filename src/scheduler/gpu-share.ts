import { gpuFreeMilli, normalizeGpuType } from '../domain/resources.js';
import type { GpuView, MachineView } from './snapshot.js';

/**
 * Shares of a GPU (issue 29, docs/scheduling.md, "Shares of a GPU and fragmentation"): each GPU
 * has a free amount in thousandths, a request asks for whole GPUs or for a share of one. Pure; the
 * planner's policies (`share-policies.ts`) and the simulator use the same fit rule.
 */

/** A whole GPU, in thousandths (the trace's `gpu_milli`). */
export const WHOLE_GPU_MILLI = 1000;

export interface ShareGpu {
  index: number;
  /** Normalised (lower case) type. */
  type: string;
  /** Free thousandths: 1000 idle, 0 full. */
  freeMilli: number;
  /** Its memory, bytes; null or absent: unknown (it takes no request that bounds GPU memory). */
  memoryBytesTotal?: number | null;
  /** Its memory no share holds, bytes (absent: memoryBytesTotal). */
  memoryBytesFree?: number;
}

export interface ShareMachine {
  id: string;
  name: string;
  cpuMillisTotal: number;
  cpuMillisFree: number;
  memoryBytesTotal: number;
  memoryBytesFree: number;
  gpus: ShareGpu[];
  /**
   * The GPU requests placed on it, counted by `gpuClassOf` ("share", "1-gpu", …): what the
   * clustering policy scores. Kept by `takeShare`, replaced (never changed in place), so copies of
   * a machine may share it. Absent: none known.
   */
  gpuClasses?: Readonly<Record<string, number>>;
}

export interface ShareRequest {
  cpuMillis: number;
  memoryBytes: number;
  /** 0 for CPU-only work; 1 for a share. */
  gpuCount: number;
  /** Thousandths on each of its GPUs: 1000 for whole GPUs, 1–999 for a share of one; 0 without GPUs. */
  gpuMilli: number;
  /** Acceptable types, normalised; empty: any. */
  gpuTypes: readonly string[];
  /**
   * GPU memory it needs on each of its GPUs, bytes (`gpu: {memory: 10Gi}`); absent: no bound. A
   * share holds that much of its GPU's memory; a whole GPU needs a GPU with that much in all.
   */
  gpuMemoryBytes?: number;
}

/** Null when the request is well formed, else why not (a share is of one GPU only). */
export function shareRequestProblem(r: ShareRequest): string | null {
  if (!Number.isInteger(r.gpuCount) || r.gpuCount < 0) return `GPU count ${r.gpuCount} is not a whole number`;
  if (!Number.isInteger(r.gpuMilli) || r.gpuMilli < 0 || r.gpuMilli > WHOLE_GPU_MILLI) return `GPU share ${r.gpuMilli} is not 0–1000 thousandths`;
  if ((r.gpuCount === 0) !== (r.gpuMilli === 0)) return `${r.gpuCount} GPUs of ${r.gpuMilli} thousandths`;
  if (r.gpuMilli < WHOLE_GPU_MILLI && r.gpuCount > 1) return `a share is of one GPU only, not ${r.gpuCount} × ${r.gpuMilli / WHOLE_GPU_MILLI}`;
  return null;
}

/** A share of one GPU (not a whole one, not CPU-only). */
export function isShare(r: ShareRequest): boolean {
  return r.gpuCount === 1 && r.gpuMilli < WHOLE_GPU_MILLI;
}

/** The kind of GPU request, as the FGD paper's simulator names its GPU affinity: "share", "N-gpu", or null without GPUs. */
export function gpuClassOf(r: Pick<ShareRequest, 'gpuCount' | 'gpuMilli'>): string | null {
  if (r.gpuCount === 0) return null;
  return r.gpuMilli < WHOLE_GPU_MILLI ? 'share' : `${r.gpuCount}-gpu`;
}

/** What the request takes from the cluster's GPUs, in thousandths. */
export function requestGpuMilli(r: ShareRequest): number {
  return r.gpuCount * r.gpuMilli;
}

export function acceptsShareType(r: Pick<ShareRequest, 'gpuTypes'>, type: string): boolean {
  return r.gpuTypes.length === 0 || r.gpuTypes.includes(type);
}

/**
 * Whether the GPU's memory can hold the request: no bound asked, or a known memory with that much
 * in all (whole GPUs) or free (a share). A GPU whose memory is unknown takes no bounded request:
 * the bound could not be kept.
 */
export function gpuMemoryFits(g: ShareGpu, r: Pick<ShareRequest, 'gpuMemoryBytes' | 'gpuMilli'>): boolean {
  const need = r.gpuMemoryBytes;
  if (need === undefined || need === 0) return true;
  const total = g.memoryBytesTotal;
  if (total === undefined || total === null) return false;
  return r.gpuMilli < WHOLE_GPU_MILLI ? (g.memoryBytesFree ?? total) >= need : total >= need;
}

/** The machine's free GPU thousandths, all GPUs together. */
export function freeGpuMilli(m: ShareMachine): number {
  let total = 0;
  for (const g of m.gpus) total += g.freeMilli;
  return total;
}

/**
 * Every GPU choice the request may take on the machine now (empty: it does not fit). CPU-only:
 * one empty choice. Whole GPUs: per acceptable type, its lowest-indexed idle GPUs (1000 free), so a
 * whole GPU never shares a GPU with a share. A share: each acceptable GPU with room for it, one
 * choice each; which one is the policy's decision.
 */
export function gpuChoices(m: ShareMachine, r: ShareRequest): number[][] {
  if (r.cpuMillis > m.cpuMillisFree || r.memoryBytes > m.memoryBytesFree) return [];
  if (r.gpuCount === 0) return [[]];
  const out: number[][] = [];
  if (isShare(r)) {
    for (const g of m.gpus) if (acceptsShareType(r, g.type) && g.freeMilli >= r.gpuMilli && gpuMemoryFits(g, r)) out.push([g.index]);
    return out;
  }
  const idleByType = new Map<string, number[]>();
  // Lowest indices first; machines list their GPUs in index order, so the copy is rarely needed.
  const inOrder = m.gpus.every((g, i) => i === 0 || m.gpus[i - 1]!.index < g.index);
  for (const g of inOrder ? m.gpus : [...m.gpus].sort((a, b) => a.index - b.index)) {
    if (g.freeMilli !== WHOLE_GPU_MILLI || !acceptsShareType(r, g.type) || !gpuMemoryFits(g, r)) continue;
    const list = idleByType.get(g.type) ?? [];
    list.push(g.index);
    idleByType.set(g.type, list);
  }
  for (const type of [...idleByType.keys()].sort()) {
    const idle = idleByType.get(type)!;
    if (idle.length >= r.gpuCount) out.push(idle.slice(0, r.gpuCount));
  }
  return out;
}

/** Null when taking `gpuIndices` for the request fits the machine now, else why not: the re-check on apply. */
export function shareAllocationProblem(m: ShareMachine, r: ShareRequest, gpuIndices: readonly number[]): string | null {
  const bad = shareRequestProblem(r);
  if (bad !== null) return bad;
  if (r.cpuMillis > m.cpuMillisFree) return `needs ${r.cpuMillis} CPU millis, ${m.cpuMillisFree} free`;
  if (r.memoryBytes > m.memoryBytesFree) return `needs ${r.memoryBytes} memory bytes, ${m.memoryBytesFree} free`;
  if (gpuIndices.length !== r.gpuCount) return `${gpuIndices.length} GPUs for a request of ${r.gpuCount}`;
  if (new Set(gpuIndices).size !== gpuIndices.length) return 'a GPU index twice';
  const types = new Set<string>();
  for (const i of gpuIndices) {
    const g = m.gpus.find((x) => x.index === i);
    if (g === undefined) return `no GPU ${i}`;
    if (!acceptsShareType(r, g.type)) return `GPU ${i} is ${g.type}, wants ${r.gpuTypes.join('|')}`;
    // A whole GPU only where nothing is shared; a share only where it fits.
    if (r.gpuMilli === WHOLE_GPU_MILLI && g.freeMilli !== WHOLE_GPU_MILLI) return `GPU ${i} holds shares (${g.freeMilli} of 1000 free)`;
    if (g.freeMilli < r.gpuMilli) return `GPU ${i} has ${g.freeMilli} thousandths free, needs ${r.gpuMilli}`;
    if (!gpuMemoryFits(g, r)) {
      const have = g.memoryBytesTotal === undefined || g.memoryBytesTotal === null ? 'unknown' : `${g.memoryBytesFree ?? g.memoryBytesTotal} bytes free`;
      return `GPU ${i} memory ${have}, needs ${r.gpuMemoryBytes} bytes`;
    }
    types.add(g.type);
  }
  if (types.size > 1) return `mixed GPU types ${[...types].join(', ')}`;
  return null;
}

/** Takes a fitting allocation (check `shareAllocationProblem` first) from the machine. */
export function takeShare(m: ShareMachine, r: ShareRequest, gpuIndices: readonly number[]): void {
  for (const i of gpuIndices) {
    const g = m.gpus.find((x) => x.index === i)!;
    g.freeMilli -= r.gpuMilli;
    // A share holds its memory bound; a whole GPU holds all of it (nothing else fits there anyway).
    if (r.gpuMilli < WHOLE_GPU_MILLI && r.gpuMemoryBytes !== undefined && g.memoryBytesTotal !== undefined && g.memoryBytesTotal !== null) {
      g.memoryBytesFree = (g.memoryBytesFree ?? g.memoryBytesTotal) - r.gpuMemoryBytes;
    }
  }
  m.cpuMillisFree -= r.cpuMillis;
  m.memoryBytesFree -= r.memoryBytes;
  const kind = gpuClassOf(r);
  if (kind !== null) m.gpuClasses = { ...m.gpuClasses, [kind]: (m.gpuClasses?.[kind] ?? 0) + 1 };
}

/**
 * One GPU as the share planner reads it. Each object is made whole, in one literal per set of
 * fields present (the same fields in the same order as adding the memory fields one by one after):
 * adding them after made V8 move each object through hidden classes, a pass's largest cost in
 * making share machines (docs/throughput.md, "Placement at scale").
 */
function shareGpuOf(g: GpuView, type: string): ShareGpu {
  const index = g.index;
  const freeMilli = gpuFreeMilli(g);
  const total = g.memoryBytesTotal;
  const free = g.memoryBytesFree;
  if (total !== undefined)
    return free !== undefined
      ? { index, type, freeMilli, memoryBytesTotal: total, memoryBytesFree: free }
      : { index, type, freeMilli, memoryBytesTotal: total };
  return free !== undefined ? { index, type, freeMilli, memoryBytesFree: free } : { index, type, freeMilli };
}

/** A scheduler machine view as a share machine: each GPU's free thousandths (absent: free ones idle, 1000, busy ones full, 0) and memory. */
export function shareMachineOf(m: MachineView): ShareMachine {
  // Without object spreads, and each GPU's type normalised once per run of one model (a machine's
  // GPUs are mostly all of one): a pass makes one per GPU of 7,000 machines.
  // (`map`, not pushes: an array of the GPUs' length, not one grown past it.)
  let raw: string | null = null;
  let type = '';
  const gpus = m.gpus.map((g) => {
    if (g.type !== raw) {
      raw = g.type;
      type = normalizeGpuType(raw);
    }
    return shareGpuOf(g, type);
  });
  return {
    id: m.id,
    name: m.name,
    cpuMillisTotal: m.cpuMillisTotal,
    cpuMillisFree: m.cpuMillisFree,
    memoryBytesTotal: m.memoryBytesTotal,
    memoryBytesFree: m.memoryBytesFree,
    gpus,
  };
}
