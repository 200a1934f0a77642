import type { MachineHealth } from '../domain/machine-health.js';
import type { MachineScheduling } from '../domain/machine-scheduling.js';
import type { Placement, Resources } from '../domain/resources.js';
import type { TeamQuota, TeamUsage } from '../domain/team.js';

/**
 * What the pure scheduler sees: machines with what is free on them now, and the ready stages.
 * Built by the store in one read; the plan the scheduler returns is re-checked on apply.
 */
export interface GpuView {
  index: number;
  /** Normalised (lower case) type, e.g. "h100". */
  type: string;
  /** False while an active attempt holds this device (any part of it). */
  free: boolean;
  /**
   * Thousandths of it no active attempt holds (issue 29): 1000 idle, 0 held whole or shared to
   * the full. Absent: `free ? 1000 : 0`. A whole-GPU stage takes only a GPU at 1000.
   */
  freeMilli?: number;
  /** Its memory, bytes, where the machine reports it (null/absent: unknown, a share's memory bound cannot be checked there). */
  memoryBytesTotal?: number | null;
  /** Its memory no active share holds, bytes (absent: memoryBytesTotal). */
  memoryBytesFree?: number;
}

export interface MachineView {
  id: string;
  name: string;
  health: MachineHealth;
  /** What an operator wants of it; only `eligible` machines take new work. */
  scheduling: MachineScheduling;
  region: string | null;
  labels: Record<string, string>;
  cpuMillisTotal: number;
  memoryBytesTotal: number;
  cpuMillisFree: number;
  memoryBytesFree: number;
  gpus: GpuView[];
  /** Attempts holding resources there, where the reader counted them: a draining machine with none
   *  is shown `drained` (shownScheduling), in the reasons as in `gantry machines`. */
  heldAttempts?: number;
}

export interface QueuedStage {
  stageId: string;
  jobId: string;
  stageName: string;
  pool: string;
  priority: number;
  /** When it became ready (ms). */
  readySince: number;
  /** When its job was submitted (ms): among equal priorities, stages of older jobs go first, so
   *  work already under way finishes before new work starts (default: readySince). */
  submittedAt?: number;
  resources: Resources;
  placement: Placement;
  /** Its job's team (quota owner and fair-share unit); absent: "default". */
  team?: string;
  /** May be preempted, and may borrow idle capacity beyond its team's quota. */
  preemptible?: boolean;
  /** Its time limit, if any: with one, it may backfill a held machine (docs/scheduling.md, "Reservations"). */
  timeoutSeconds?: number | null;
}

/** An attempt holding room on a machine, with when it must end by its time limit (null: no limit). */
export interface HeldUntil {
  machineId: string;
  gpuIndices: number[];
  /** Thousandths of each GPU it holds (absent: 1000, whole GPUs). */
  gpuMilli?: number;
  cpuMillis: number;
  memoryBytes: number;
  endsBy: number | null;
}

/** A team as the scheduler sees it: its weight, quota and what its attempts hold now. */
export interface TeamView {
  name: string;
  weight: number;
  quota: TeamQuota;
  usage: TeamUsage;
}

/**
 * An attempt holding resources on a machine, as preemption sees it: a possible victim when its
 * stage is preemptible and it is still active; `leaving` when the server has ended it already
 * (preempted, canceled, lost) and its agent is killing it: its room frees soon.
 */
export interface RunningAttempt {
  attemptId: string;
  token: number;
  stageId: string;
  jobId: string;
  stageName: string;
  machineId: string;
  team: string;
  priority: number;
  preemptible: boolean;
  cpuMillis: number;
  memoryBytes: number;
  gpuIndices: number[];
  gpuType: string | null;
  /** Thousandths of each GPU it holds (absent: 1000, whole GPUs); a share frees only that much. */
  gpuMilli?: number;
  /** GPU memory it holds on each GPU, bytes (absent: none bounded). */
  gpuMemoryBytes?: number;
  /** When it started (or was placed, if not started yet), ms: work since then is what preempting it loses. */
  startedAt: number;
  /** When its stage was last preempted, ms, or null: a stage is not preempted twice within the cool-down. */
  stagePreemptedAt: number | null;
  leaving: boolean;
  /**
   * A gang's member (docs/gangs.md, "Preemption"): its gang (rank 0's attempt id), size and rank.
   * Stopping one member stops them all, so preemption takes and costs the gang whole.
   */
  gang?: { id: string; size: number; rank: number };
}

/** Every machine with what is free on it now. */
export interface ClusterView {
  /** Changes whenever a machine is added, removed, or changes health, scheduling or capacity. */
  version: number;
  machines: MachineView[];
}

/** A shape with ready stages (src/domain/stage-shape.ts) and what each of its stages asks for. */
export interface QueueShape {
  shape: string;
  pool: string;
  resources: Resources;
  placement: Placement;
  /** Its stages' team and preemptibility (part of the shape). */
  team?: string;
  preemptible?: boolean;
  timeoutSeconds?: number | null;
}

export interface SchedulerSnapshot {
  /** Changes whenever a machine is added or changes health or capacity. */
  clusterVersion?: number;
  machines: MachineView[];
  /** Ready stages whose backoff has passed. Any order; the scheduler sorts. */
  queue: QueuedStage[];
  /** Teams with their quotas and usage: with it, the order is fair-share and quotas bind (docs/scheduling.md). */
  teams?: TeamView[];
  /** Attempts that hold resources and could be preempted or are leaving: with it, the pass may preempt. */
  running?: RunningAttempt[];
  /** The pass's time (ms), for preemption's lost-work arithmetic and cool-down. */
  now?: number;
  /** A stage preempted less than this long ago (ms) is not preempted again. */
  preemptionCooldownMs?: number;
  /** What holds room on held machines and until when: with it (and `now`), backfill. */
  heldUntil?: HeldUntil[];
}

/** Victims stopped so that `stageId` can run on `machineId` once they have left. */
export interface PlannedPreemption {
  stageId: string;
  machineId: string;
  victims: { attemptId: string; token: number; stageId: string }[];
  /** In words, for the victims' events: "preempted by train of job …, priority 900 over 10". */
  reason: string;
}

export interface PlannedPlacement {
  stageId: string;
  machineId: string;
  /** Device indices on that machine, ascending; empty for CPU stages. */
  gpuIndices: number[];
  /** Thousandths of each GPU it takes: absent or 1000 whole GPUs, below 1000 a share (one index). */
  gpuMilli?: number;
  /** GPU memory it takes on each GPU, bytes (a share with `gpu.memory`); absent: none bounded. */
  gpuMemoryBytes?: number;
  cpuMillis: number;
  memoryBytes: number;
  /**
   * A gang stage (issue 31, docs/gangs.md): every member's place, rank 0 first, on distinct
   * machines; `machineId` and `gpuIndices` above are rank 0's, and `cpuMillis`/`memoryBytes` each
   * member's. One placement per stage, as for any stage, so consumers keyed by stage are unchanged;
   * whoever applies or counts machines reads every member (placementMembers). Absent: not a gang.
   */
  members?: GangMember[];
}

/** One member of a gang's placement: its rank (0 is the rendezvous master), machine and devices. */
export interface GangMember {
  rank: number;
  machineId: string;
  /** Device indices on that machine, ascending; whole GPUs only. */
  gpuIndices: number[];
}

export interface PendingStage {
  stageId: string;
  /** One line a person can act on, e.g. "no machine with 2 free h100 GPUs: 3 of 3 matching machines busy". */
  reason: string;
  /** No machine could run it even if every machine were idle: waiting will not help until the
   *  cluster changes (a machine joins, returns or is resized). */
  unplaceable: boolean;
}

export interface Plan {
  placements: PlannedPlacement[];
  pending: PendingStage[];
  /** Machines held in this pass for a waiting multi-GPU stage, or a gang (one entry per machine, all of its set): nothing after it in the order was placed there (docs/scheduling.md, "Reservations"; docs/gangs.md). */
  reservations?: { stageId: string; machineId: string }[];
  /** Attempts to preempt (docs/scheduling.md, "Preemption"). */
  preemptions?: PlannedPreemption[];
}
