import type { AttemptEndKind } from '../domain/attempt-end.js';
import type { AttemptState } from '../domain/attempt-state.js';
import type { JobState } from '../domain/job-state.js';
import type { StageDefinition, StageLimits } from '../domain/job-definition.js';
import type { MachineHealth } from '../domain/machine-health.js';
import type { OutputLimits } from '../domain/output-limits.js';
import type { MachineScheduling } from '../domain/machine-scheduling.js';
import type { StageState } from '../domain/stage-state.js';
import type { TokenKind } from '../domain/token-kind.js';
import type { TopicMessage } from '../domain/topic.js';

/** What the store hands back. Plain data; the API turns these into its wire types. */
export interface JobRecord {
  id: string;
  name: string;
  team: string;
  priority: number;
  labels: Record<string, string>;
  state: JobState;
  failureReason: string | null;
  cancelRequestedAt: number | null;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  /** The job this one reruns, and the stages it started from (docs/rerun.md); null for a job submitted as such. */
  rerunOf: string | null;
  rerunFrom: string[] | null;
}

export interface OutputFile {
  path: string;
  size: number;
}

/** A committed output as the stage's manifest names it: `blob` is its key in the artifact store. */
export interface CommittedOutput extends OutputFile {
  blob: string;
}

/** A reused stage's marker: the job and attempt that ran it, the attempt's run time and GPUs. */
export interface StageReuse {
  fromJob: string;
  attemptId: string | null;
  runMs: number;
  gpus: number;
}

export interface AttemptRecord {
  id: string;
  stageId: string;
  jobId: string;
  stageName: string;
  number: number;
  token: number;
  machineId: string;
  machineName: string;
  gpuIndices: number[];
  gpuType: string | null;
  /** Thousandths of each of its GPUs it holds: 1000 whole GPUs (and CPU-only attempts), 1–999 a share of its one GPU (0024). */
  gpuMilli: number;
  /** GPU memory a share holds on its GPU, bytes; null: none bounded. */
  gpuMemoryBytes: number | null;
  cpuMillis: number;
  memoryBytes: number;
  state: AttemptState;
  exitCode: number | null;
  signal: string | null;
  reason: string | null;
  /** How it ended; null while it is active, and for attempts that ended before the kind was recorded (0017). */
  endKind: AttemptEndKind | null;
  pid: number | null;
  outputs: OutputFile[] | null;
  leaseExpiresAt: number | null;
  scheduledAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  /** When its process was known gone (its agent stopped listing it): its log is complete then. */
  releasedAt: number | null;
  /** What the stage last said of its progress, and when; null before it says anything. */
  progress: { fraction: number; message: string | null; at: number } | null;
  /** What it used, from its cgroup, as its outcome said (0019): its memory's peak and its CPU seconds; null when unknown. */
  memoryPeakBytes: number | null;
  cpuSeconds: number | null;
  /** Its log past the head cap (0023): null, the head never filled it; else the bytes dropped between its head and its tail. */
  logCutBytes: number | null;
  /** A gang's member (0026, docs/gangs.md): rank 0's attempt id, its rank, the gang's size. Absent on any other attempt. */
  gang?: { id: string; rank: number; size: number };
}

/** What an attempt used, measured by its agent from its cgroup when it ended; null where it could not say. */
export interface AttemptUsage {
  memoryPeakBytes: number | null;
  cpuSeconds: number | null;
}

/** An attempt that holds resources on its machine now (not yet released), with its job's name and team: what runs where. */
export interface HeldAttempt extends AttemptRecord {
  jobName: string;
  team: string;
}

export interface StageRecord {
  id: string;
  jobId: string;
  name: string;
  position: number;
  pool: string;
  state: StageState;
  priority: number;
  definition: StageDefinition;
  attemptsUsed: number;
  lostUsed: number;
  token: number;
  currentAttemptId: string | null;
  outputAttemptId: string | null;
  readySince: number | null;
  notBefore: number | null;
  pendingReason: string | null;
  endReason: string | null;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
  /** Set on a stage a rerun reused (docs/rerun.md): it did not run in this job. */
  reused: StageReuse | null;
  /** When the artifact store's size budget released its committed outputs. */
  outputsReleasedAt: number | null;
}

export interface StageDetail extends StageRecord {
  attempts: AttemptRecord[];
  /** Its committed outputs (its manifest); null unless it succeeded and still holds them. */
  outputs: CommittedOutput[] | null;
}

export interface JobDetail extends JobRecord {
  stages: StageDetail[];
  /** Jobs that rerun this one, oldest first. */
  reruns: string[];
}

export interface JobSummary extends JobRecord {
  stageCounts: Partial<Record<StageState, number>>;
}

export interface MachineGpu {
  index: number;
  uuid: string | null;
  name: string;
  /** Normalised type, e.g. "h100". */
  type: string;
  memoryMiB: number | null;
}

/** What an agent says of its machine when it registers. */
export interface MachineRegistration {
  name: string;
  cpuMillis: number;
  memoryBytes: number;
  gpus: MachineGpu[];
  /** GPUs were declared by a flag or the cluster file, not found by nvidia-smi. */
  gpusDeclared: boolean;
  region: string | null;
  labels: Record<string, string>;
  agent: Record<string, unknown>;
  /** What its agent enforces on attempts (docs/containment.md); absent or null: its agent did not say (an older agent). */
  containment?: MachineContainment | null;
}

/**
 * What an agent enforces on the attempts it runs, as it reported at registration: the wire's
 * ContainmentReport (src/api/contract/containment.ts, whose comment says what each field means),
 * held to it by contract-agreement.ts. Kept whole, fields a later agent adds included.
 */
export interface MachineContainment {
  mechanism: 'cgroup-v2' | 'cgroup-v1' | 'cgroup-hybrid' | 'none';
  memory: boolean;
  cpu: boolean;
  pids: boolean;
  devices: boolean;
  kill: 'cgroup.kill' | 'freezer' | 'process-group';
  user: string;
  sandbox: 'bwrap' | null;
  problems: string[];
  /** How stages sharing a GPU are bounded (`--gpu-sharing`); absent from agents before shares. */
  gpuSharing?: 'mps' | 'time-slicing';
  /** On a machine with MIG devices: whether each attempt can open only its own MIG devices' capability files; absent otherwise. */
  migIsolated?: boolean;
  /** Where attempts join cgroups: whether the host mounts them with favordynmods (false: each burst's first join waits for a grace period); absent otherwise. */
  favordynmods?: boolean;
}

export interface MachineRecord extends MachineRegistration {
  containment: MachineContainment | null;
  id: string;
  /** Where other machines reach it: its agent's `--advertise-addr`, else its host, else its name (docs/gangs.md, "Rendezvous"). */
  address: string;
  /** The ports its agent keeps for gangs' master ports (`--gang-ports`; 29500-29599 where it said none). */
  gangPorts: { first: number; last: number };
  health: MachineHealth;
  scheduling: MachineScheduling;
  lastHeartbeatAt: number;
  /** The heartbeat period it was last told (docs/failure-detection.md, "A period that grows with the fleet"); null: the configured one. */
  heartbeatMs: number | null;
  registeredAt: number;
  /**
   * What active attempts hold there. `gpuIndices`: each GPU anything holds, once, ascending;
   * `gpuHeld`: for each of them, the thousandths held (1000: whole, or shared to the full) and the
   * GPU memory its shares hold, bytes (issue 29).
   */
  allocated: { cpuMillis: number; memoryBytes: number; gpuIndices: number[]; attempts: number; gpuHeld: GpuHeld[] };
}

/** What active attempts hold of one GPU: thousandths (1000 whole) and, for shares that bound it, memory bytes. */
export interface GpuHeld {
  index: number;
  milli: number;
  memoryBytes: number;
}

/** Everything an agent needs to run one attempt. */
export interface Assignment {
  attemptId: string;
  token: number;
  jobId: string;
  stageName: string;
  attemptNumber: number;
  command: string[];
  env: Record<string, string>;
  gpuIndices: number[];
  /** A share of its one GPU (issue 29): thousandths of it and the GPU memory it holds; absent: whole GPUs. */
  gpuShare?: { milli: number; memoryBytes?: number };
  timeoutSeconds: number | null;
  /** null: the cluster's disconnect grace. */
  disconnectGraceSeconds: number | null;
  /** A preemptible stage: the agent gives it GANTRY_CHECKPOINT_DIR, kept across its attempts. */
  checkpoint?: boolean;
  /** Upstream stages whose committed outputs the attempt reads. */
  inputs: { stage: string; attemptId: string; files: OutputFile[] }[];
  /** What its agent's containment applies (docs/containment.md): the wire's AttemptLimitsWire. */
  limits: AttemptLimits;
  /** A gang's member (docs/gangs.md, "Rendezvous"): its rank, the gang's size, where rank 0 listens. Absent: not a gang. */
  gang?: GangRendezvous;
  /** Written `running` at placement (docs/agent.md, "Started at placement"): spawned with no acknowledgement. */
  started?: boolean;
}

/** Where a gang's members meet: rank 0's machine's advertised address and the port reserved for the gang there. */
export interface GangRendezvous {
  rank: number;
  size: number;
  masterAddr: string;
  masterPort: number;
}

/** An attempt's request and limits as its agent applies them: the stage's resources, its limits (null: none beyond the request) and whether it asked for the network. */
export interface AttemptLimits extends StageLimits {
  requestCpuMillis: number;
  requestMemoryBytes: number;
  network: boolean;
  /** What it may leave as outputs (domain/output-limits.ts), when the caller gave the server's OutputPolicy. */
  outputs?: OutputLimits;
}

export interface EventRecord {
  seq: number;
  at: number;
  type: string;
  jobId: string | null;
  stageName: string | null;
  attemptId: string | null;
  machineId: string | null;
  message: string;
  data: Record<string, unknown>;
}

export type OutboxMessage = TopicMessage & {
  /** The outbox row's id (several messages of one transaction share one row: `part`). */
  id: number;
  /** Its place in its row, for a row holding several (BATCH_TOPIC); absent for a row of one. */
  part?: number;
  createdAt: number;
  /** False for a message the store kept no row of (Store.keepOutboxInMemory): nothing to mark published. */
  stored?: boolean;
  /**
   * True for a placement hint (`pool:ready`, `capacity:freed`) of a transaction whose pass before
   * its commit ran to its end (Store.placeBeforeCommit): that pass read the room it announces, so
   * it needs no loop pass of its own (docs/scheduling.md, "Which hints wake the loop").
   */
  handled?: boolean;
  /**
   * With `handled`: when (performance.now()) its transaction began, before its snapshot. A loop pass
   * that started after it may have read without this transaction's writes, and then placed nothing
   * the transaction's pass could not see either: such a hint still wakes the loop.
   */
  handledSince?: number;
};

/** One stored piece of a stage's log; `id` orders the pieces of a stage and is the cursor for reading on. */
export interface LogChunk {
  id: number;
  attemptNumber: number;
  /** A gang member's chunk: its rank. Absent: not a gang. */
  rank?: number;
  stream: string;
  at: number;
  data: string;
}

/** A piece of one stream of an attempt's output at its byte offset in that stream (see attemptLogAppend). */
export interface LogPiece {
  stream: 'stdout' | 'stderr';
  offset: number;
  /** Bytes of the stream the piece covers; `data` is their decoding. */
  bytes: number;
  data: string;
  /** Part of the log's tail, shipped once the process has ended: it may start past the mark (the bytes between are cut). */
  tail?: boolean;
}

/** How many bytes of each stream the server has taken; `capped`: nothing more will be stored. */
export interface LogMarks {
  stdout: number;
  stderr: number;
  capped: boolean;
  /** With `capped`: how many bytes of its end the server keeps, shipped as tail pieces once the process has ended. */
  tailBytes?: number;
}

/** Who asked for a change, and what it was: written with the change (TxContext.audit). */
export interface AuditEntry {
  tokenId: string | null;
  actor: string;
  action: string;
  target: string | null;
}

export interface AuditRecord extends AuditEntry {
  seq: number;
  /** When it happened (first, if more than once). */
  at: number;
  result: string;
  /** How many times: a refusal repeated within the fold window is one row (Store.auditRecord). */
  count: number;
  /** When it last happened (`at` when once). */
  lastAt: number;
}

/** An API token as the store knows it: never the token itself. */
export interface TokenRecord {
  id: string;
  kind: TokenKind;
  team: string | null;
  machineId: string | null;
  name: string;
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
}
