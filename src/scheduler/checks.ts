import { MachineHealth } from '../domain/machine-health.js';
import { MachineScheduling } from '../domain/machine-scheduling.js';
import { GPU_MILLI_WHOLE, gpuFreeMilli, gpuMilliOf, normalizeGpuType } from '../domain/resources.js';
import type { GpuView, MachineView, QueuedStage } from './snapshot.js';

/** A module constant, read in the checks' inner loops (an imported binding is read through a getter under tsx). */
const WHOLE = GPU_MILLI_WHOLE;

/**
 * Why a machine cannot take a stage. Static reasons hold until the cluster or the stage changes;
 * busy reasons clear as running work finishes. Declared in the order the checks below run
 * (`checks`): explain's funnel follows this order, so a new reason goes where its check goes.
 */
export const RejectReason = {
  /** Machine health is not `ready` (suspect, lost). */
  notReady: 'not-ready',
  /** An operator took the machine out of service (cordoned, draining). */
  notEligible: 'not-eligible',
  /** The stage wants another region. */
  region: 'region',
  /** The machine lacks one of the stage's k=v labels. */
  labels: 'labels',
  /** The machine has no GPU of any acceptable type. */
  gpuType: 'gpu-type',
  /** It has acceptable GPUs, but no one type with `count` of them in total. */
  gpuTotal: 'gpu-total',
  /** Enough acceptable GPUs, but not `count` of one type whose memory is known and holds the stage's `gpu.memory`. */
  gpuMemory: 'gpu-memory',
  /** Its total CPU is below the request. */
  cpuTotal: 'cpu-total',
  /** Its total memory is below the request. */
  memoryTotal: 'memory-total',
  /** A CPU stage, and the machine has GPUs: it keeps its CPUs for GPU work (placement.allowGpuMachines). */
  gpuMachine: 'gpu-machine',
  /** Enough GPUs of an acceptable type in total, not enough free now (a share: no GPU with its thousandths, and its memory, free). */
  gpuBusy: 'gpu-busy',
  /** Enough CPU in total, not enough free now. */
  cpuBusy: 'cpu-busy',
  /** Enough memory in total, not enough free now. */
  memoryBusy: 'memory-busy',
  /** A CPU stage allowed on a GPU machine: enough CPU and memory free, but not beyond the share its free GPUs keep. */
  gpuShare: 'gpu-share',
} as const;
export type RejectReason = (typeof RejectReason)[keyof typeof RejectReason];

const BUSY: ReadonlySet<RejectReason> = new Set([RejectReason.gpuBusy, RejectReason.cpuBusy, RejectReason.memoryBusy, RejectReason.gpuShare]);

/** True for reasons that clear on their own as work finishes. */
export function isBusyReason(r: RejectReason): boolean {
  return BUSY.has(r);
}

/** A stage's request, normalised once: GPU types lower case, de-duplicated, sorted. */
export interface StageNeed {
  cpuMillis: number;
  memoryBytes: number;
  /** 0 for a CPU-only stage. */
  gpuCount: number;
  /** Empty means any type. */
  gpuTypes: readonly string[];
  /** Thousandths of each of its GPUs: 1000 whole GPUs, 1–999 a share of one (gpuCount 1), 0 for a CPU stage. */
  gpuMilli: number;
  /** GPU memory it needs on each GPU, bytes (a share holds that much; a whole GPU must have that much); null: no bound. */
  gpuMemoryBytes: number | null;
  region: string | null;
  labels: Readonly<Record<string, string>>;
  /** A CPU stage that may run on machines with GPUs (outside their free GPUs' share). */
  allowGpuMachines: boolean;
}

export function stageNeed(stage: Pick<QueuedStage, 'resources' | 'placement'>): StageNeed {
  const gpu = stage.resources.gpu;
  const gpuCount = gpu && gpu.count > 0 ? gpu.count : 0;
  const gpuTypes = gpuCount > 0 && gpu ? [...new Set(gpu.types.map(normalizeGpuType))].sort() : [];
  return {
    cpuMillis: stage.resources.cpuMillis,
    memoryBytes: stage.resources.memoryBytes,
    gpuCount,
    gpuTypes,
    gpuMilli: gpuCount > 0 ? gpuMilliOf(stage.resources) : 0,
    gpuMemoryBytes: gpuCount > 0 && gpu?.memoryBytes ? gpu.memoryBytes : null,
    region: stage.placement.region,
    labels: stage.placement.labels,
    allowGpuMachines: gpuCount === 0 && stage.placement.allowGpuMachines === true,
  };
}

/**
 * The CPU and memory a stage may take on a machine now. A GPU stage: all that is free. A CPU
 * stage on a machine with GPUs: what is free beyond each free GPU's share (the machine's total
 * divided by its GPUs), so that CPU work never leaves a free GPU without the CPUs and memory to
 * use it; when every GPU is busy, all that is free.
 */
export function roomFor(need: StageNeed, m: MachineView): { cpuMillis: number; memoryBytes: number } {
  if (need.gpuCount > 0 || m.gpus.length === 0) return { cpuMillis: m.cpuMillisFree, memoryBytes: m.memoryBytesFree };
  // Free GPUs in thousandths: a GPU with a quarter held keeps three quarters of its share.
  let free = 0;
  for (const g of m.gpus) free += gpuFreeMilli(g);
  const whole = m.gpus.length * WHOLE;
  return {
    cpuMillis: m.cpuMillisFree - Math.ceil((m.cpuMillisTotal * free) / whole),
    memoryBytes: m.memoryBytesFree - Math.ceil((m.memoryBytesTotal * free) / whole),
  };
}

export function acceptsGpuType(need: StageNeed, type: string): boolean {
  return need.gpuTypes.length === 0 || need.gpuTypes.includes(normalizeGpuType(type));
}

/** Whether the GPU's memory, in all, could hold the stage's bound: none asked, or known and large enough. Unknown memory takes no bounded stage. */
export function gpuMemoryAllows(need: Pick<StageNeed, 'gpuMemoryBytes'>, g: Pick<GpuView, 'memoryBytesTotal'>): boolean {
  if (need.gpuMemoryBytes === null) return true;
  return g.memoryBytesTotal !== undefined && g.memoryBytesTotal !== null && g.memoryBytesTotal >= need.gpuMemoryBytes;
}

/**
 * How many stages of this need the GPU could take now: whole GPUs, 1 when idle (1000 free) and 0
 * otherwise, since a whole GPU never shares; a share, as many as its free thousandths and, with a
 * memory bound, its free memory hold.
 */
export function gpuRoomFor(need: Pick<StageNeed, 'gpuMilli' | 'gpuMemoryBytes'>, g: GpuView): number {
  if (need.gpuMemoryBytes !== null && !gpuMemoryAllows(need, g)) return 0;
  const free = gpuFreeMilli(g);
  if (need.gpuMilli >= WHOLE || need.gpuMilli <= 0) return free === WHOLE ? 1 : 0;
  let n = Math.floor(free / need.gpuMilli);
  if (need.gpuMemoryBytes !== null && need.gpuMemoryBytes > 0)
    n = Math.min(n, Math.floor((g.memoryBytesFree ?? g.memoryBytesTotal ?? 0) / need.gpuMemoryBytes));
  return n;
}

/**
 * Per acceptable type on this machine: how many devices (`all`), how many of them could hold the
 * stage's GPU memory bound (`total`: what "fits when idle" counts), and how many have room for it
 * now (`free`: idle for whole GPUs, room for its thousandths and memory for a share).
 */
export function gpuCountsByType(need: StageNeed, machine: MachineView): Map<string, { all: number; total: number; free: number }> {
  const out = new Map<string, { all: number; total: number; free: number }>();
  const n = tally(need, machine, true);
  for (let k = 0; k < n; k++) out.set(tallyTypes[k]!, { all: tallyAll[k]!, total: tallyTotal[k]!, free: tallyFree[k]! });
  return out;
}

/**
 * Per acceptable type (in the order first met), what `gpuCountsByType` returns as a Map, kept in
 * these module arrays instead, read at once by the caller (gpuCountsByType itself, the checks
 * below, the pass's queue depth). The planner asks it per machine per shape, up to millions of times a pass
 * at 10,000 machines (docs/throughput.md, "Placement at scale"); nothing it calls re-enters it.
 */
const tallyTypes: string[] = [];
const tallyAll: number[] = [];
const tallyTotal: number[] = [];
const tallyFree: number[] = [];

/** Fills the tally for the need on the machine; returns how many acceptable types it has. */
function tally(need: StageNeed, machine: MachineView, withFree: boolean): number {
  let n = 0;
  // Most machines have one model: a name equal to the GPU before's is normalised and matched once.
  let raw: string | null = null;
  let t = '';
  let accepted = false;
  for (const g of machine.gpus) {
    if (g.type !== raw) {
      raw = g.type;
      t = normalizeGpuType(raw);
      accepted = need.gpuTypes.length === 0 || need.gpuTypes.includes(t);
    }
    if (!accepted) continue;
    let k = n - 1;
    while (k >= 0 && tallyTypes[k] !== t) k--;
    if (k < 0) {
      k = n++;
      tallyTypes[k] = t;
      tallyAll[k] = 0;
      tallyTotal[k] = 0;
      tallyFree[k] = 0;
    }
    tallyAll[k]! += 1;
    if (need.gpuMemoryBytes === null || gpuMemoryAllows(need, g)) tallyTotal[k]! += 1;
    if (withFree && gpuRoomFor(need, g) > 0) tallyFree[k]! += 1;
  }
  return n;
}

/** The most GPUs of one acceptable type on the machine: in all, that hold its memory bound, or with room for it now. */
function mostOfOneType(need: StageNeed, machine: MachineView, of: 'all' | 'total' | 'free'): number {
  const n = tally(need, machine, of === 'free');
  const counts = of === 'all' ? tallyAll : of === 'total' ? tallyTotal : tallyFree;
  let most = 0;
  for (let k = 0; k < n; k++) if (counts[k]! > most) most = counts[k]!;
  return most;
}

/** How many stages of the need the machine's free GPUs could take now: per acceptable type, its free devices over the stage's count, summed. */
export function wholeGpuStagesRoom(need: StageNeed, machine: MachineView): number {
  const n = tally(need, machine, true);
  let stages = 0;
  for (let k = 0; k < n; k++) stages += Math.floor(tallyFree[k]! / need.gpuCount);
  return stages;
}

/** Acceptable GPU types on this machine with at least `gpuCount` free devices, sorted. */
export function fittingGpuTypes(need: StageNeed, machine: MachineView): string[] {
  const out: string[] = [];
  for (const [t, c] of gpuCountsByType(need, machine)) if (c.free >= need.gpuCount) out.push(t);
  return out.sort();
}

/** One feasibility rule: null when the machine passes it, else why not. */
export type Check = (need: StageNeed, machine: MachineView) => RejectReason | null;

/**
 * Whether the machine takes new work at all, whatever the stage: alive, then in service. The apply
 * step re-checks a placement with it too.
 */
export function machineRefusal(m: Pick<MachineView, 'health' | 'scheduling'>): RejectReason | null {
  if (m.health !== MachineHealth.ready) return RejectReason.notReady;
  if (m.scheduling !== MachineScheduling.eligible) return RejectReason.notEligible;
  return null;
}

export const checkTakesWork: Check = (_need, m) => machineRefusal(m);

export const checkRegion: Check = (need, m) => (need.region === null || need.region === m.region ? null : RejectReason.region);

// The checks below run per machine per shape, millions of times a pass at 10,000 machines: they
// loop without making an array or a closure per call (docs/throughput.md, "Placement at scale").

export const checkLabels: Check = (need, m) => {
  // The need's own enumerable keys, as Object.entries reads them, in the same order.
  for (const k in need.labels) {
    if (!Object.hasOwn(need.labels, k)) continue;
    if (!Object.hasOwn(m.labels, k) || m.labels[k] !== need.labels[k]) return RejectReason.labels;
  }
  return null;
};

export const checkGpuType: Check = (need, m) => {
  if (need.gpuCount === 0) return null;
  for (const g of m.gpus) if (acceptsGpuType(need, g.type)) return null;
  return RejectReason.gpuType;
};

export const checkGpuTotal: Check = (need, m) => {
  if (need.gpuCount === 0) return null;
  return mostOfOneType(need, m, 'all') >= need.gpuCount ? null : RejectReason.gpuTotal;
};

/** A stage that bounds GPU memory: some type with `count` GPUs whose memory is known and large enough. */
export const checkGpuMemory: Check = (need, m) => {
  if (need.gpuCount === 0 || need.gpuMemoryBytes === null) return null;
  return mostOfOneType(need, m, 'total') >= need.gpuCount ? null : RejectReason.gpuMemory;
};

export const checkCpuTotal: Check = (need, m) => (m.cpuMillisTotal >= need.cpuMillis ? null : RejectReason.cpuTotal);

export const checkMemoryTotal: Check = (need, m) => (m.memoryBytesTotal >= need.memoryBytes ? null : RejectReason.memoryTotal);

export const checkGpuBusy: Check = (need, m) => {
  if (need.gpuCount === 0) return null;
  return mostOfOneType(need, m, 'free') >= need.gpuCount ? null : RejectReason.gpuBusy;
};

export const checkGpuMachine: Check = (need, m) => (need.gpuCount === 0 && m.gpus.length > 0 && !need.allowGpuMachines ? RejectReason.gpuMachine : null);

export const checkCpuBusy: Check = (need, m) => (m.cpuMillisFree >= need.cpuMillis ? null : RejectReason.cpuBusy);

export const checkMemoryBusy: Check = (need, m) => (m.memoryBytesFree >= need.memoryBytes ? null : RejectReason.memoryBusy);

/** Free enough, but only inside the share the machine's free GPUs keep (roomFor): it waits for GPU work to take them. */
export const checkGpuShare: Check = (need, m) => {
  // roomFor's arithmetic, without its object.
  if (need.gpuCount > 0 || m.gpus.length === 0)
    return m.cpuMillisFree >= need.cpuMillis && m.memoryBytesFree >= need.memoryBytes ? null : RejectReason.gpuShare;
  let free = 0;
  for (const g of m.gpus) free += gpuFreeMilli(g);
  const whole = m.gpus.length * WHOLE;
  const cpu = m.cpuMillisFree - Math.ceil((m.cpuMillisTotal * free) / whole);
  const memory = m.memoryBytesFree - Math.ceil((m.memoryBytesTotal * free) / whole);
  return cpu >= need.cpuMillis && memory >= need.memoryBytes ? null : RejectReason.gpuShare;
};

/** Whether the stage could run on this machine at all, were it idle and in service: what a submit is warned by. */
export const fitChecks: readonly Check[] = [
  checkRegion,
  checkLabels,
  checkGpuType,
  checkGpuTotal,
  checkGpuMemory,
  checkCpuTotal,
  checkMemoryTotal,
  checkGpuMachine,
];

/** Static checks first, so a busy reason always means "would fit on this machine when idle". */
export const checks: readonly Check[] = [checkTakesWork, ...fitChecks, checkGpuBusy, checkCpuBusy, checkMemoryBusy, checkGpuShare];

/** The first rule the machine fails for this stage, or null when the stage fits there now. */
export function firstReject(need: StageNeed, machine: MachineView): RejectReason | null {
  for (const check of checks) {
    const r = check(need, machine);
    if (r !== null) return r;
  }
  return null;
}
