import type { Placement, Resources } from './resources.js';
import type { StageOutputLimits } from './output-limits.js';

/**
 * A job spec after validation and normalisation: every default filled in, every quantity in
 * integer units. This is what the store persists; the user's own text is kept beside it.
 */
export interface BackoffPolicy {
  initialSeconds: number;
  maxSeconds: number;
}

export interface RetryPolicy {
  /** Attempts that count against the user's budget (exit codes, signals, timeouts); 1 = no retry. */
  maxAttempts: number;
  backoff: BackoffPolicy;
  /** When set, only these exit codes are retried; any other non-zero exit fails the stage at once. */
  onExitCodes: number[] | null;
  /** Attempts lost to infrastructure (machine lost, lease expired) allowed before the stage fails. */
  maxLost: number;
}

export interface StageDefinition {
  name: string;
  needs: string[];
  resources: Resources;
  placement: Placement;
  /** argv, run without a shell. */
  command: string[];
  env: Record<string, string>;
  /** Variables whose values are secrets (docs/security.md): given to the command only. Absent when there are none. */
  secretEnv?: Record<string, string>;
  timeoutSeconds: number | null;
  /** Agent side: how long it keeps running while the server cannot be reached; null: the cluster's setting. Absent in definitions stored before it existed. */
  disconnectGraceSeconds?: number | null;
  retry: RetryPolicy;
  preemptible: boolean;
  /** Preemptible stages: seconds between TERM and KILL when preempted, to checkpoint. */
  preemptionGraceSeconds?: number;
  /** Ready this long without being placed: the stage fails, its pending reason as its end reason. Absent or null: it waits as long as it takes. */
  queueTimeoutSeconds?: number | null;
  /** What the agent's containment enforces beyond the request (docs/containment.md). Absent in definitions stored before it existed: read it through stageLimits. */
  limits?: StageLimits;
  /** What the stage may leave as outputs (spec `limits.outputs`; null parts: the server's default). Absent: the server's defaults (docs/security.md, "Output limits"). */
  outputLimits?: StageOutputLimits;
  /**
   * A gang's outputs (spec `outputs.ranks: all`): every member's committed, each rank's under
   * `rank-N/` (docs/gangs.md, "Outputs"). Absent (every other stage, and definitions stored before
   * it existed): the stage commits its attempt's outputs, a gang its rank 0's at their own paths.
   */
  outputs?: StageOutputs;
  /** The stage asked for the network: only an agent's `--sandbox` takes it away from stages that do not. Absent in definitions stored before it existed: false. */
  network?: boolean;
}

/** Whose outputs a gang commits: only written when it is every rank's. */
export interface StageOutputs {
  ranks: 'all';
}

/**
 * A stage's limits above its request, as the agent applies them (docs/containment.md): bytes,
 * millicores, a count of processes and threads. Null: the memory limit is the request, the CPU is
 * not capped (only weighted by the request), the pids limit is the agent's `--pids-max`.
 */
export interface StageLimits {
  memoryBytes: number | null;
  cpuMillis: number | null;
  pids: number | null;
}

export const NO_LIMITS: Readonly<StageLimits> = Object.freeze({ memoryBytes: null, cpuMillis: null, pids: null });
/** The fewest and the most processes a stage's `limits.pids` may say: below 16 not even a shell pipeline starts; the most is the kernel's pid_max ceiling. */
export const MIN_PIDS_LIMIT = 16;
export const MAX_PIDS_LIMIT = 4_194_304;

/** A stage's limits, its definition's or none (definitions stored before limits existed). */
export function stageLimits(def: Pick<StageDefinition, 'limits'>): StageLimits {
  return def.limits ? { ...def.limits } : { ...NO_LIMITS };
}

export interface JobDefinition {
  name: string;
  team: string;
  /** 0..1000, higher first. */
  priority: number;
  labels: Record<string, string>;
  stages: StageDefinition[];
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxAttempts: 3,
  backoff: { initialSeconds: 5, maxSeconds: 300 },
  onExitCodes: null,
  maxLost: 5,
};
export const DEFAULT_TEAM = 'default';
export const DEFAULT_PRIORITY = 50;
export const DEFAULT_PREEMPTION_GRACE_SECONDS = 30;
export const MAX_STAGES = 1000;

/** A preempted stage's time between TERM and KILL, to checkpoint. */
export function preemptionGraceMs(def: Pick<StageDefinition, 'preemptionGraceSeconds'>): number {
  return (def.preemptionGraceSeconds ?? DEFAULT_PREEMPTION_GRACE_SECONDS) * 1000;
}
