import type { Generated } from 'kysely';
import type { AttemptEndKind } from '../domain/attempt-end.js';
import type { AttemptState } from '../domain/attempt-state.js';
import type { JobState } from '../domain/job-state.js';
import type { MachineHealth } from '../domain/machine-health.js';
import type { MachineScheduling } from '../domain/machine-scheduling.js';
import type { MachineLifecycle } from '../autoscale/machine-lifecycle.js';
import type { StageState } from '../domain/stage-state.js';
import type { TokenKind } from '../domain/token-kind.js';

/**
 * The tables, as Kysely sees them. Private to the store: nothing outside src/store imports this.
 * Times are integer milliseconds since the epoch; JSON columns are text. State columns are the
 * domain's unions (the migrations' check constraints hold the database to the same lists); keys
 * the database numbers are `Generated`.
 */

/** The replicas' leader lease: one row, `control`. */
export interface LeaderTable {
  name: string;
  holder: string | null;
  term: number;
  expires_at: number;
}

export interface TeamsTable {
  name: string;
  weight: number;
  /** A TeamQuota as JSON (0012); null: nothing limited. */
  quota: string | null;
  created_at: number;
  /** 0012; null for teams made before. */
  updated_at: number | null;
}

export interface JobsTable {
  id: string;
  name: string;
  team: string;
  priority: number;
  labels: string;
  state: JobState;
  definition: string;
  source: string | null;
  failure_reason: string | null;
  cancel_requested_at: number | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
  /** The job this one reruns (0014; docs/rerun.md), and the stages it started from (JSON list). */
  rerun_of: string | null;
  rerun_from: string | null;
}

/** A submit's Idempotency-Key: the request it was used for and the jobs that request made.
 *  Unique per (scope, key): `scope` is whose key it is (0020; `team:<name>`, `token:<id>`). */
export interface IdempotencyKeysTable {
  scope: string;
  key: string;
  request_hash: string;
  job_ids: string;
  created_at: number;
}

export interface StagesTable {
  id: string;
  job_id: string;
  name: string;
  position: number;
  pool: string;
  state: StageState;
  priority: number;
  definition: string;
  attempts_used: number;
  lost_used: number;
  token: number;
  current_attempt_id: string | null;
  output_attempt_id: string | null;
  ready_since: number | null;
  not_before: number | null;
  pending_reason: string | null;
  /** Unused since 0003 (shapes): was the cluster version at which no machine could run it. */
  parked_at: number | null;
  /** Its shape (src/domain/stage-shape.ts): the scheduler's queues are per shape. */
  shape: string | null;
  /** queueTimeoutSeconds × 1000, or null (0011). */
  queue_timeout_ms: number | null;
  /** 1 when its definition says preemptible (0012): what preemption's read filters on. */
  preemptible: number;
  /** When an attempt of it was last preempted (0012): the cool-down against thrashing. */
  preempted_at: number | null;
  /** A reused stage of a rerun (0014): the job whose attempt produced its outputs (its
   *  output_attempt_id), that attempt's run time and GPUs. Null for a stage that runs. */
  reused_from: string | null;
  reused_run_ms: number | null;
  reused_gpus: number | null;
  /** The reused attempt's GPUs in thousandths, all together (0024): 250 for a quarter share; null before 0024 (reused_gpus whole GPUs). */
  reused_gpu_milli: number | null;
  /** When the artifact store's size budget released its committed outputs (0014). */
  outputs_released_at: number | null;
  end_reason: string | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

export interface AttemptsTable {
  id: string;
  stage_id: string;
  job_id: string;
  stage_name: string;
  number: number;
  token: number;
  machine_id: string;
  gpu_indices: string;
  gpu_type: string | null;
  /** Thousandths of each of its GPUs it holds (0024): 1000 whole GPUs (and CPU-only attempts), 1–999 a share of one. */
  gpu_milli: number;
  /** GPU memory a share holds on its GPU, bytes (0024); null: none bounded. */
  gpu_memory_bytes: number | null;
  cpu_millis: number;
  memory_bytes: number;
  state: AttemptState;
  exit_code: number | null;
  signal: string | null;
  reason: string | null;
  /** How it ended (AttemptEndKind), written with its terminal state; null while active and on rows ended before 0017. */
  end_kind: AttemptEndKind | null;
  pid: number | null;
  outputs: string | null;
  lease_expires_at: number | null;
  scheduled_at: number;
  started_at: number | null;
  finished_at: number | null;
  released_at: number | null;
  /** Bytes of log stored so far: past the head's cap only the tail is stored (store/log-caps.ts). */
  log_bytes: number;
  /** Bytes of the stream's log file taken so far (stored, or cut between the head and the tail): the next piece's offset. */
  stdout_bytes: number;
  stderr_bytes: number;
  /** What the stage last said of its progress (GANTRY_PROGRESS_FILE), 0..1, its message and when (0013). */
  progress: number | null;
  progress_message: string | null;
  progress_at: number | null;
  /** What it used, from its cgroup, as its agent reported with its outcome (0019): its memory's peak in bytes, its CPU seconds; null when unknown. */
  memory_peak_bytes: number | null;
  cpu_seconds: number | null;
  /** Its log past the head cap (0023): null, the head never filled it; else the bytes dropped between the head and the tail (0 until the tail comes). */
  log_cut_bytes: number | null;
  /** A gang's member (0026, docs/gangs.md): rank 0's attempt id (the stage's current attempt), its rank and the gang's size; null on any other attempt. */
  gang_id: string | null;
  gang_rank: number | null;
  gang_size: number | null;
  /** A gang's master port on rank 0's machine, reserved when it was placed (0027, docs/gangs.md "Rendezvous"); null on any other attempt and on gang rows from before 0027. */
  gang_master_port: number | null;
}

export interface MachinesTable {
  id: string;
  name: string;
  cpu_millis: number;
  memory_bytes: number;
  gpus: string;
  gpus_declared: number;
  region: string | null;
  labels: string;
  health: MachineHealth;
  /** What an operator wants of it (0005): eligible, cordoned, draining or removed. */
  scheduling: MachineScheduling;
  agent: string;
  /** What its agent enforces on attempts (a ContainmentReport as JSON, 0019); null: its agent did not say. */
  containment: string | null;
  last_heartbeat_at: number;
  /** The heartbeat period it was last told (0028, docs/failure-detection.md): its silence is judged by it. Null: the configured one. */
  heartbeat_ms: number | null;
  registered_at: number;
  updated_at: number;
  /** Grows by one with every change of what the cluster's view reads (0029, a trigger writes it): the cluster's version is the rows' count plus its sum. */
  revision: Generated<number>;
}

export interface EventsTable {
  /** The database numbers it (autoincrement / bigserial). */
  seq: Generated<number>;
  at: number;
  type: string;
  job_id: string | null;
  stage_name: string | null;
  attempt_id: string | null;
  machine_id: string | null;
  message: string;
  data: string;
}

export interface OutboxTable {
  id: Generated<number>;
  topic: string;
  payload: string;
  created_at: number;
  published_at: number | null;
}

export interface LogChunksTable {
  id: Generated<number>;
  attempt_id: string;
  stream: string;
  at: number;
  data: string;
  /** Where the piece starts in its stream's log file; null for chunks stored before offsets (0006). */
  byte_offset: number | null;
}

export interface TokensTable {
  id: string;
  kind: TokenKind;
  team: string | null;
  machine_id: string | null;
  name: string;
  /** sha256 of the token, hex: the token itself is never stored. */
  hash: string;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
}

export interface AuditTable {
  seq: Generated<number>;
  at: number;
  token_id: string | null;
  /** Who, in words: "team ml token tok_… (alice)". */
  actor: string;
  /** What: "job.submit", "machine.cordon", "token.revoke", … */
  action: string;
  target: string | null;
  /** "ok" (with what changed, when it says) or "refused: 403 forbidden: …". */
  result: string;
  /** How many times it happened: a refusal repeated within the fold window adds to its row (0022). */
  count: Generated<number>;
  /** The last time it happened, when more than once; null: once, at `at`. */
  last_at: number | null;
  /** What makes a refusal the same as another (a hash), for folding; null: a change made, never folded. */
  fold_key: string | null;
}

/** A stored output file's bytes, once whatever names it (docs/rerun.md): `sha256:<hex>`, or
 *  `legacy:<attemptId>/<path>` for a file written before 0014, read where it was written. */
export interface ArtifactBlobsTable {
  key: string;
  size: number;
  created_at: number;
  /** Its upload, or when it lost its last reference: collection goes oldest first by it. */
  touched_at: number;
}

/** A stage's committed outputs, one row per file: the job's reference to each blob. */
export interface OutputFilesTable {
  stage_id: string;
  job_id: string;
  path: string;
  blob: string;
  size: number;
  /** The attempt that produced it (another job's, for a reused stage): agents download by it. */
  attempt_id: string;
}

/** What an attempt uploaded: the only files its outcome may commit. */
export interface OutputUploadsTable {
  attempt_id: string;
  path: string;
  blob: string;
  size: number;
  created_at: number;
}

/** A machine the autoscaler started (0025; src/autoscale/autoscale-row.ts says what each column means). */
export interface AutoscaledMachinesTable {
  name: string;
  pool: string;
  lifecycle: MachineLifecycle;
  reason: string;
  started_at: number;
  requested_at: number | null;
  provider_id: string | null;
  joined_at: number | null;
  machine_id: string | null;
  draining_at: number | null;
  released_at: number | null;
  stopped_at: number | null;
  fail_reason: string | null;
  /** JSON list of stage ids. */
  held_for: string;
  updated_at: number;
}

/** The autoscaler's latest word on a waiting stage it starts nothing for (0025). */
export interface AutoscaleWaitsTable {
  stage_id: string;
  kind: string;
  reason: string;
  pool: string | null;
  at: number;
}

export interface Database {
  teams: TeamsTable;
  jobs: JobsTable;
  stages: StagesTable;
  attempts: AttemptsTable;
  machines: MachinesTable;
  events: EventsTable;
  outbox: OutboxTable;
  log_chunks: LogChunksTable;
  idempotency_keys: IdempotencyKeysTable;
  tokens: TokensTable;
  audit: AuditTable;
  leader: LeaderTable;
  installation: { id: string };
  artifact_blobs: ArtifactBlobsTable;
  output_files: OutputFilesTable;
  output_uploads: OutputUploadsTable;
  autoscaled_machines: AutoscaledMachinesTable;
  autoscale_waits: AutoscaleWaitsTable;
}
