import type { JobDefinition } from '../domain/job-definition.js';
import type { JobState } from '../domain/job-state.js';
import type { MachineHealth } from '../domain/machine-health.js';
import type { Plan, SchedulerSnapshot } from '../scheduler/snapshot.js';
import type {
  Assignment,
  AttemptRecord,
  EventRecord,
  JobDetail,
  JobSummary,
  LogChunk,
  MachineRecord,
  MachineRegistration,
  OutboxMessage,
  OutputFile,
} from './records.js';
import type { StoreCapabilities } from './store-capabilities.js';

/**
 * The one door to the database. Every method is one transaction and speaks in domain verbs; every
 * state change inside is a guarded write (`… WHERE id = ? AND state = ? AND token = ?`), so a
 * caller that lost a race changes nothing and is told so. Time always comes in as `now` from the
 * caller's clock: the store never reads a clock of its own.
 *
 * Two adapters share one implementation (`KyselyStore`) and one conformance suite
 * (`src/store/conformance/`).
 */
export interface Store {
  readonly capabilities: StoreCapabilities;
  migrate(): Promise<void>;
  close(): Promise<void>;
  /** Called after a transaction that wrote outbox rows commits, so the relay can run at once. */
  onOutbox(listener: () => void): void;

  // --- jobs (user side) ---
  jobSubmit(p: { definition: JobDefinition; source: string | null; now: number }): Promise<JobDetail>;
  jobGet(p: { jobId: string }): Promise<JobDetail | null>;
  jobExists(p: { jobId: string }): Promise<boolean>;
  jobList(p: { state?: JobState; team?: string; limit: number }): Promise<JobSummary[]>;
  /** Cancel wins: every unfinished stage becomes canceled and every active attempt canceled, in one
   *  transaction. Returns `changed: false` for a job that had already ended. */
  jobCancel(p: { jobId: string; now: number; reason: string }): Promise<{ job: JobDetail; changed: boolean }>;
  /** A stage's log chunks after `afterId`, at most `limit` of them (a page; `id` is the cursor). */
  stageLogs(p: { jobId: string; stage: string; attempt?: number; afterId?: number; limit: number }): Promise<LogChunk[] | null>;
  eventsList(p: { jobId?: string; afterSeq?: number; limit: number }): Promise<EventRecord[]>;

  // --- scheduler ---
  /** Ready stages whose backoff has passed (at most `limitPerPool` per pool, in queue order) and
   *  every machine with what is free on it. */
  schedulerSnapshot(p: { now: number; limitPerPool: number }): Promise<SchedulerSnapshot>;
  /** Applies a plan, re-checking each placement against fresh state; a placement whose stage is
   *  no longer ready or whose machine no longer has room is skipped and reported. A stage the plan
   *  found unplaceable is parked at `clusterVersion` (the snapshot's) until the cluster changes. */
  planApply(p: { plan: Plan; now: number; leaseMs: number; clusterVersion?: number }): Promise<PlanApplyResult>;

  // --- machines and agents ---
  machineRegister(p: MachineRegistration & { now: number }): Promise<MachineRecord>;
  /** Renews the machine's heartbeat and the leases of the attempts it reports, and says which of
   *  those it must kill (no longer current). Attempts it no longer reports release their
   *  resources; a running one it no longer reports is lost. */
  machineHeartbeat(p: {
    machineId: string;
    running: { attemptId: string; token: number }[];
    now: number;
    leaseMs: number;
    /** A running attempt missing from the list, this long after it started, is lost. */
    missingAfterMs: number;
    jitter: number;
  }): Promise<HeartbeatResult>;
  /** Read-only: which of these attempts the machine must kill (a held heartbeat re-checks with it). */
  machineKillList(p: { machineId: string; running: { attemptId: string; token: number }[] }): Promise<HeartbeatResult['kill']>;
  machineList(): Promise<MachineRecord[]>;
  machineGet(p: { machineId: string }): Promise<MachineRecord | null>;
  /** Attempts placed on this machine that its agent has not started yet, less those in `exclude`
   *  (the ones the agent already has). */
  machineAssignments(p: { machineId: string; exclude?: readonly string[] }): Promise<Assignment[]>;

  // --- attempts (agent side); each throws StaleAttemptError for a non-current attempt ---
  attemptStart(p: { attemptId: string; token: number; pid: number | null; now: number; leaseMs: number }): Promise<AttemptRecord>;
  attemptComplete(p: AttemptCompletion & { now: number; jitter: number }): Promise<CompletionResult>;
  attemptLogAppend(p: { attemptId: string; token: number; chunks: { stream: string; data: string }[]; now: number }): Promise<void>;
  /** The attempt if it may still write outputs (active, token current). */
  attemptForUpload(p: { attemptId: string; token: number }): Promise<AttemptRecord>;
  /** A committed output's owner: the attempt whose outputs a stage committed. */
  attemptGet(p: { attemptId: string }): Promise<AttemptRecord | null>;

  // --- reconciler ---
  /** Machines silent past `suspectAfterMs` become suspect; past `lostAfterMs`, lost, and their
   *  active attempts lost (stages back to ready, counted against the infrastructure budget). */
  machinesReap(p: { now: number; suspectAfterMs: number; lostAfterMs: number; jitter: number }): Promise<ReapResult>;
  /** Running attempts whose lease ran out, and scheduled ones never acknowledged, become lost. */
  attemptsReap(p: { now: number; ackTimeoutMs: number; jitter: number }): Promise<ReapResult>;

  /** Re-evaluates jobs unchanged for `staleAfterMs` (the advancer's safety net); returns the
   *  ids of jobs it had to move. */
  jobsRepair(p: { now: number; staleAfterMs: number; limit: number }): Promise<string[]>;

  /** Deletes jobs that ended before `finishedBefore`, with their stages, attempts, events and
   *  logs (at most `limit` jobs); returns the deleted attempts' ids, whose artifacts the caller
   *  removes. A retention period, as BullMQ's removeOnComplete or Argo's ttlStrategy. */
  jobsExpire(p: { finishedBefore: number; limit: number }): Promise<{ jobs: string[]; attempts: string[] }>;

  // --- outbox ---
  outboxPending(p: { limit: number }): Promise<OutboxMessage[]>;
  outboxMarkPublished(p: { ids: number[]; now: number }): Promise<void>;
  /** Deletes rows published before `before`: the outbox is a hand-off, not a history (events are). */
  outboxPrune(p: { before: number }): Promise<number>;
}

export type { MachineRegistration } from './records.js';

export interface HeartbeatResult {
  health: MachineHealth;
  kill: { attemptId: string; reason: string }[];
  /** Attempts found missing from the agent's list and marked lost. */
  lost: string[];
}

export interface AttemptCompletion {
  attemptId: string;
  token: number;
  exitCode: number | null;
  signal: string | null;
  /** Why it ended when not a plain exit: "timeout", "spawn failed: …", "killed: lease lost". */
  reason: string | null;
  outputs: OutputFile[];
}

export interface CompletionResult {
  /** false when this exact outcome had already been recorded (a repeated report). */
  accepted: boolean;
  attempt: AttemptRecord;
  jobState: JobState;
}

export interface PlanApplyResult {
  applied: AttemptRecord[];
  skipped: { stageId: string; why: string }[];
}

export interface ReapResult {
  machines: { machineId: string; from: MachineHealth; to: MachineHealth }[];
  lostAttempts: string[];
}
