import type { AutoscaleStore } from '../autoscale/autoscale-row.js';
import type { LogCaps } from './log-caps.js';
import type { AttemptEnd } from '../domain/attempt-end.js';
import type { OutputPolicy, UploadRoom } from '../domain/output-limits.js';
import type { JobDefinition, StageDefinition } from '../domain/job-definition.js';
import type { JobState } from '../domain/job-state.js';
import type { MachineHealth } from '../domain/machine-health.js';
import type { TokenKind } from '../domain/token-kind.js';
import type { ClusterView, HeldUntil, Plan, QueuedStage, QueueShape, RunningAttempt, SchedulerSnapshot, TeamView } from '../scheduler/snapshot.js';
import type { Team, TeamQuota } from '../domain/team.js';
import type {
  Assignment,
  AttemptRecord,
  AttemptUsage,
  EventRecord,
  HeldAttempt,
  JobDetail,
  JobSummary,
  LogChunk,
  LogMarks,
  LogPiece,
  MachineRecord,
  MachineRegistration,
  OutboxMessage,
  OutputFile,
  TokenRecord,
  AuditEntry,
  AuditRecord,
} from './records.js';
import type { StoreCapabilities } from './store-capabilities.js';
import type { CollectionPlan, DeletedFiles, RerunParams, RerunResult } from './rerun-records.js';

/**
 * The one door to the database. Every method is one transaction and speaks in domain verbs; every
 * state change inside is a guarded write (`… WHERE id = ? AND state = ? AND token = ?`), so a
 * caller that lost a race changes nothing and is told so. Time always comes in as `now` from the
 * caller's clock: the store never reads a clock of its own.
 *
 * Two adapters share one implementation (`KyselyStore`) and one conformance suite
 * (`src/store/conformance/`).
 */
/** The leader lease (docs/replicas.md). `term` grows by one with each new holder. */
export interface LeaderLease {
  holder: string | null;
  term: number;
  expiresAt: number;
  /** Whether the caller holds it now. */
  leader: boolean;
  /** How long the claim waited before its first statement ran (a connection, BEGIN), where the store times it: for the slow claim's log. */
  waitedMs?: number;
}

export interface Store extends AutoscaleStore {
  readonly capabilities: StoreCapabilities;
  /** Brings the schema to the latest version; returns the names of the migrations it ran (none: it was current). */
  migrate(): Promise<string[]>;
  close(): Promise<void>;
  /** Called after a transaction that wrote outbox rows commits, with those rows, so they can be
   *  published at once; the relay publishes whatever was not (a crash right after the commit).
   *  Placement hints a pass before the commit handled say so (`OutboxMessage.handled`). */
  onOutbox(listener: (messages: OutboxMessage[]) => void): void;

  // --- the clock and the leader (docs/replicas.md) ---
  /**
   * With several writers (PostgreSQL), each transaction then acts at the later of its `now` and
   * this clock's time when it begins, so that times follow commit order (docs/store-contract.md).
   * Without it (tests), `now` is used as given.
   */
  useClock(clock: { now(): number }): void;
  /**
   * From now on, outbox messages are handed to the onOutbox listeners after each commit without
   * a row: for a bus in this process (docs/throughput.md, "The outbox"), whose subscribers a crash
   * takes too, so a row would protect nothing. Rows written before are still relayed.
   */
  keepOutboxInMemory(): void;
  /** This database's id, made when it was created: what a shared bus tells installations apart by. */
  installationId(): Promise<string>;
  /** The database's own clock, in ms: replicas keep their offset from it, so all read one time. */
  databaseNow(): Promise<number>;
  /**
   * Takes or renews the leader lease for `holder`: it becomes (or stays) leader when it holds the
   * lease already or the lease has expired; a new holder gets the next term. Returns the lease as
   * it is after the call, whoever holds it.
   */
  leaderClaim(p: { holder: string; now: number; ttlMs: number }): Promise<LeaderLease>;
  /** Gives the lease up (a replica stopping), so the next one need not wait for it to expire. */
  leaderResign(p: { holder: string; term: number }): Promise<void>;
  /**
   * This store, with every writing verb first checking, in its own transaction, that `term()` is
   * still the leader's lease and unexpired; if not, it throws NotLeaderError and writes nothing.
   * The scheduler and reconciler of a replica write only through it.
   */
  asLeader(term: () => { holder: string; term: number } | null): Store;

  // --- jobs (user side) ---
  /** With `idempotency`: a key seen before in its scope with the same request throws AlreadySubmitted (with
   *  its jobs), with another request ConflictError; otherwise the key is recorded with the jobs. */
  // `audit` on a verb: who asked for this change (docs/security.md); its audit row is written in the change's transaction.
  jobSubmit(p: { definition: JobDefinition; source: string | null; now: number; idempotency?: Idempotency; audit?: AuditEntry }): Promise<JobDetail>;
  /** Submits many jobs in one transaction, all or none (each as `jobSubmit` writes it; each pool with
   *  a ready stage told once); returns their ids in the order given. `sources[i]` is job i's text. */
  jobSubmitBatch(p: {
    definitions: readonly JobDefinition[];
    sources?: readonly (string | null)[];
    now: number;
    idempotency?: Idempotency;
    audit?: AuditEntry;
  }): Promise<string[]>;
  /** Forgets Idempotency-Keys recorded before `before`; returns how many. */
  idempotencyPrune(p: { before: number }): Promise<number>;
  jobGet(p: { jobId: string }): Promise<JobDetail | null>;
  /** The job's team, or null when there is no such job: what a team's access is checked against. */
  jobTeam(p: { jobId: string }): Promise<string | null>;
  /** Newest first; `before`: the page after that job (NotFoundError for an unknown one). */
  /** `name`: jobs whose name holds it, in any case. */
  jobList(p: { state?: JobState; team?: string; name?: string; limit: number; before?: string }): Promise<JobSummary[]>;
  /** Deletes an ended job with all its rows and its references to outputs (ConflictError if not
   *  ended); null: no such job. Its outputs no other job names are left to collection (artifactsCollect). */
  jobDelete(p: { jobId: string; now: number; audit?: AuditEntry }): Promise<DeletedFiles | null>;
  /**
   * A new run of an ended job (docs/rerun.md), in one transaction: stages not in the rerun set are
   * reused (succeeded, with the original's manifests), the rest run. Every refusal (ValidationError,
   * ConflictError) writes nothing; `dryRun` plans only. With `idempotency`, as jobSubmit. Null: no such job.
   */
  jobRerun(p: RerunParams & { now: number; audit?: AuditEntry }): Promise<RerunResult | null>;
  /** Cancel wins: every unfinished stage becomes canceled and every active attempt canceled, in one
   *  transaction. Returns `changed: false` for a job that had already ended. */
  jobCancel(p: { jobId: string; now: number; reason: string; audit?: AuditEntry }): Promise<{ job: JobDetail; changed: boolean }>;
  /** A stage's log chunks after `afterId`, at most `limit` of them (a page; `id` is the cursor). */
  /** `rank`: a gang's member (default 0, the only one of an ordinary stage), or `'all'`: every member's chunks interleaved in the order stored, each with its rank. */
  stageLogs(p: { jobId: string; stage: string; attempt?: number; rank?: number | 'all'; afterId?: number; limit: number }): Promise<LogChunk[] | null>;
  /** Events after `afterSeq`, oldest first (`newestFirst`: the latest `limit`); `team`: only its jobs' events (and, with `withMachines`, those of no job: machines');
   *  `pool`: only events of stages in that pool; `jobId: null`: only events of no job; `noun`: only `<noun>:*` events (`autoscale`: its decisions). */
  eventsList(p: {
    jobId?: string | null;
    team?: string;
    pool?: string;
    withMachines?: boolean;
    afterSeq?: number;
    noun?: string;
    newestFirst?: boolean;
    limit: number;
  }): Promise<EventRecord[]>;
  /** The latest event's seq (0 when none): where a live stream with nothing to resume starts. */
  eventsHead(): Promise<number>;

  // --- tokens (docs/security.md) ---
  /** Makes a token; only its hash is stored. A team token's team is created when it is new. */
  tokenCreate(p: {
    id: string;
    kind: TokenKind;
    team: string | null;
    name: string;
    hash: string;
    expiresAt: number | null;
    now: number;
    audit?: AuditEntry;
  }): Promise<TokenRecord>;
  /** The token with this hash, revoked and expired ones included (the caller says why it refuses one). */
  tokenByHash(p: { hash: string }): Promise<TokenRecord | null>;
  tokenList(p: { includeRevoked?: boolean }): Promise<TokenRecord[]>;
  /** Null when there is no such token; `changed: false` when it was revoked already. */
  tokenRevoke(p: { id: string; now: number; audit?: AuditEntry }): Promise<{ token: TokenRecord; changed: boolean } | null>;
  /**
   * Deletes up to `limit` tokens revoked or expired before `before`, oldest first (a dashboard's
   * sign-in sessions, a re-registered machine's old credentials); returns how many. A token that
   * is live, or that ended since, stays, so `token list --all` still shows why it was refused.
   */
  tokensPrune(p: { before: number; limit: number }): Promise<number>;

  // --- teams (docs/scheduling.md, "Teams, quotas and fair share") ---
  teamList(): Promise<Team[]>;
  teamGet(p: { name: string }): Promise<Team | null>;
  /** Creates a team (`create`) or changes its weight or quota; what is not given stays. NotFoundError for an unknown team without `create`. */
  teamPut(p: {
    name: string;
    weight?: number;
    quota?: TeamQuota;
    create: boolean;
    now: number;
    audit?: AuditEntry;
  }): Promise<{ team: Team; created: boolean; changed: boolean }>;

  // --- audit (docs/security.md) ---
  /**
   * A request that changed nothing (refused): its row on its own. `foldWithinMs`: if a row of the
   * same refusal (token, actor, action, target and result alike) began within that long before
   * `now`, that row counts one more (count, lastAt) instead of a new row being written (two writers
   * at once may each write one: a row more, never one lost).
   */
  auditRecord(p: AuditEntry & { result: string; now: number; foldWithinMs?: number }): Promise<void>;
  /** Oldest first, after `afterSeq`; from `since` (ms) on. A folded row keeps its seq while its count grows. */
  auditList(p: { afterSeq?: number; since?: number; limit: number }): Promise<AuditRecord[]>;
  /** Deletes up to `limit` audit rows that began before `before`, oldest first (the audit's retention); returns how many. */
  auditPrune(p: { before: number; limit: number }): Promise<number>;

  // --- scheduler ---
  /** Every machine with what is free on it now (held by attempts not yet released). */
  clusterView(): Promise<ClusterView>;
  /** Every machine as if idle (nothing held): what static checks need (a submit's never-placeable
   *  warning), without reading what attempts hold. */
  clusterFacts(): Promise<ClusterView>;
  /** The shapes that have ready stages; costs the number of shapes, not of stages waiting. */
  readyShapes(p: { now: number }): Promise<QueueShape[]>;
  /** The head of each named shape's queue in scheduling order (priority, then the job's
   *  submission, then the stage's readiness), at most
   *  `limit` each, leaving out stages still backing off. */
  queueHeads(p: { now: number; shapes: { shape: string; limit: number }[] }): Promise<QueuedStage[]>;
  /** The cluster and the head of every shape's queue (`limitPerShape` each): for tests and tools. */
  schedulerSnapshot(p: { now: number; limitPerShape: number }): Promise<SchedulerSnapshot>;
  /** Ready stages by pool and shape, with the oldest readiness of each (for /metrics). */
  queueStats(): Promise<{ pool: string; shape: string; ready: number; oldestReadySince: number }[]>;
  /** Where a ready stage stands in its queue (its shape's, in scheduling order): how many wait ahead of it, and in all. Null when it is not ready. */
  stageQueuePosition(p: { stageId: string }): Promise<{ ahead: number; waiting: number } | null>;
  /** Applies a plan, re-checking each placement against fresh state; a placement whose stage is
   *  no longer ready or whose machine no longer has room is skipped and reported. Pending stages
   *  are not written: why a stage waits is computed when asked (pendingReasonNow). */
  planApply(p: { plan: Plan; now: number; leaseMs: number; jitter?: number }): Promise<PlanApplyResult>;
  /** Every team with its weight, quota and (with `usage`; else zero) what its attempts hold now (docs/scheduling.md, "Teams, quotas and fair share"). */
  schedulerTeams(p: { usage: boolean }): Promise<TeamView[]>;
  /** Attempts holding resources that preemption may stop (their stage is preemptible) or that are leaving already. */
  preemptionView(): Promise<RunningAttempt[]>;
  /** What holds room on these machines, and until when by its time limit: backfill onto held machines reads it. */
  heldUntil(p: { machineIds: readonly string[]; now: number }): Promise<HeldUntil[]>;
  /**
   * From now on, every transaction that readies stages or frees capacity (publishes `pool:ready`
   * or `capacity:freed`) runs `pass` at its end, before its commit, against a `PlacementSource`
   * that reads and writes in that transaction, under a savepoint of its own (docs/scheduling.md,
   * "When a pass runs"). With several writers (PostgreSQL) one such pass runs at a time per store:
   * a transaction that finds one running commits without it (its messages still wake the caller's
   * loop). A pass that throws is undone alone and `onError` is told. A pass that resolves `true`
   * says it ran to its end with nothing left for another pass: the transaction's own placement
   * hints are then handed to onOutbox marked `handled` (anything else: not marked, they wake the
   * caller's loop; docs/scheduling.md, "Which hints wake the loop"). Returns false where it is not
   * available: the caller places from its own loop.
   */
  placeBeforeCommit(pass: (source: PlacementSource) => Promise<boolean | void>, onError: (err: unknown) => void): boolean;
  /**
   * What one scheduling pass outside a transaction (the scheduler loop's) reads and writes: the
   * store itself, or where a round trip is worth saving (PostgreSQL), a source whose reads without
   * arguments go in one (kysely/pass-reads.ts). One source a pass: what it read before a write is
   * not used after it.
   */
  placementSource(): PlacementSource;

  // --- machines and agents ---
  /**
   * With `credential` (an agent joining with a join token): refused (ConflictError) when a machine of
   * that name is alive with a credential of its own; else the machine is registered and this
   * credential issued to it, every earlier one revoked, in one transaction.
   */
  machineRegister(p: MachineRegistration & { now: number; credential?: { id: string; hash: string }; audit?: AuditEntry }): Promise<MachineRecord>;
  /** Renews the machine's heartbeat and the leases of the attempts it reports, and says which of
   *  those it must kill (no longer current). Attempts it no longer reports release their
   *  resources; a running one it no longer reports is lost. */
  machineHeartbeat(p: {
    machineId: string;
    /** `progress`: what the stage last said, sent when it changed (written with the heartbeat). */
    running: { attemptId: string; token: number; progress?: { fraction: number; message?: string } }[];
    now: number;
    leaseMs: number;
    /** A running attempt missing from the list, this long after it started, is lost. */
    missingAfterMs: number;
    /** Running attempts this heartbeat is no evidence against, whether it lists them or not: those
     *  started at placement whose agent may not have had the report's answer when it sent it
     *  (docs/failure-detection.md, "Started at placement"). */
    spare?: readonly string[];
    /** The agent's list was made after it had acted on every answer given up to this time: a
     *  running attempt it leaves out is lost only if it started more than KNOWN_AS_OF_MARGIN_MS
     *  before this (docs/failure-detection.md, "What a heartbeat's list knows"). Absent: judged
     *  by `missingAfterMs` and `spare` alone. */
    knownAsOf?: number;
    jitter: number;
    /** Write nothing when the last heartbeat written is younger than this and the list calls for
     *  nothing (see machineHeartbeat in machine-verbs.ts). */
    renewAfterMs?: number;
    /** The caller keeps heartbeats in memory and writes them with `machinesSeen`: the machine's
     *  own row is written only when the heartbeat it holds is older than this (its leases still
     *  follow `renewAfterMs`). */
    livenessAfterMs?: number;
    /** The configured period and the one this heartbeat's answer gives: the row records it, and
     *  `livenessAfterMs` grows with the period the row holds (docs/failure-detection.md, "A period
     *  that grows with the fleet"). Absent: the row's period is set to the configured one (null). */
    period?: { heartbeatMs: number; periodMs: number };
  }): Promise<HeartbeatResult>;
  /** Heartbeats kept in memory, written at once: each machine's last heartbeat becomes the time
   *  given, never an earlier one, with the period that heartbeat was told. Answers how many rows moved. */
  machinesSeen(p: { seen: readonly MachineSeen[]; now: number }): Promise<number>;
  /** How many machines are expected to heartbeat (not removed; not lost, or lost within the last minute): the fleet the heartbeat period is grown for. */
  machinesHeartbeating(p: { now: number }): Promise<number>;
  /** Read-only: which of these attempts the machine must kill (a held heartbeat re-checks with it). */
  machineKillList(p: { machineId: string; running: { attemptId: string; token: number }[] }): Promise<HeartbeatResult['kill']>;
  /** Every machine not removed, by name. */
  machineList(): Promise<MachineRecord[]>;
  /** Every attempt that holds resources on a machine now (not released), oldest placement first: what runs where. */
  attemptsHeld(): Promise<HeldAttempt[]>;
  /** By id, removed or not (an attempt's machine). */
  machineGet(p: { machineId: string }): Promise<MachineRecord | null>;
  /** A machine not removed, by name or id. */
  machineFind(p: { machine: string }): Promise<MachineRecord | null>;

  // --- machines (operator side): what an operator wants of a machine, named by name or id. Each
  // throws NotFoundError for an unknown or removed machine, and answers `changed: false` when the
  // machine already was as asked. They never touch health or attempts: what runs there goes on.
  /** No new work is placed there (a draining machine is left draining). */
  machineCordon(p: { machine: string; now: number; audit?: AuditEntry }): Promise<MachineSchedulingChange>;
  /** Back in service, from cordoned or draining. */
  machineUncordon(p: { machine: string; now: number; audit?: AuditEntry }): Promise<MachineSchedulingChange>;
  /** No new work; shown `drained` once no attempt there holds resources. With `stopRunning`, its
   *  active attempts are stopped at once: lost, their stages back in the queue, no budget used (the
   *  agent kills them on its next heartbeat); `stopped` counts them. */
  machineDrain(p: { machine: string; now: number; stopRunning?: boolean; jitter?: number; audit?: AuditEntry }): Promise<MachineSchedulingChange>;
  /** Forgets a lost machine, or a cordoned or drained one with nothing left on it (else
   *  ConflictError saying why); its attempts keep its name. Its agent registering again brings it
   *  back in service. */
  machineRemove(p: { machine: string; now: number; audit?: AuditEntry }): Promise<MachineSchedulingChange>;
  /** Attempts placed on this machine that its agent has not started yet, less those in `exclude`
   *  (the ones the agent already has), and the ones in `started` (written running at placement:
   *  MachineReportResult.startedOnPlacement) that are still running there, marked `started`. */
  /** `outputs`: the server's output policy, which each assignment's `limits.outputs` is resolved under (absent: none sent). */
  machineAssignments(p: { machineId: string; exclude?: readonly string[]; started?: readonly string[]; outputs?: OutputPolicy }): Promise<Assignment[]>;

  /** An agent's batched report (acknowledgements, pids, outcomes) in one transaction; each item
   *  is fenced as its single-attempt verb and answered on its own. Throws NotFoundError for an
   *  unknown machine. */
  machineReport(p: {
    machineId: string;
    started: { attemptId: string; token: number; pid: number | null }[];
    completed: AttemptCompletion[];
    now: number;
    leaseMs: number;
    /** Drawn once per outcome (retry backoff jitter). */
    jitter: () => number;
    /** Told of an item refused because it failed with an error other than a stale token. */
    onItemError?: (attemptId: string, err: unknown) => void;
    /** The agent runs started assignments and asked for its work: what this transaction places on
     *  this machine is written `running` at once (docs/throughput.md, "Started at placement"). */
    startOnPlacement?: boolean;
  }): Promise<MachineReportResult>;

  // --- attempts (agent side); each throws StaleAttemptError for a non-current attempt ---
  // `machineId` on the attempt verbs: the machine asking (its credential's); an attempt placed on
  // another is stale to it (StaleAttemptError), as in a report. A machine speaks for its own only.
  attemptStart(p: { attemptId: string; token: number; pid: number | null; now: number; leaseMs: number; machineId?: string }): Promise<AttemptRecord>;
  attemptComplete(p: AttemptCompletion & { now: number; jitter: number; machineId?: string }): Promise<CompletionResult>;
  /** Stores each byte of each stream once (pieces already taken are ignored); says how far each stream has come. */
  /** `caps`: how much of the log is kept, its head and its tail (log-caps.ts; default DEFAULT_LOG_CAPS). */
  attemptLogAppend(p: { attemptId: string; token: number; chunks: LogPiece[]; now: number; machineId?: string; caps?: LogCaps }): Promise<LogMarks>;
  /** A committed output's owner: the attempt whose outputs a stage committed. */
  attemptGet(p: { attemptId: string }): Promise<AttemptRecord | null>;

  // --- outputs (docs/rerun.md) ---
  /**
   * The most bytes the attempt's upload of `path` may have under its stage's and its team's output
   * limits (domain/output-limits.ts), fenced as every agent write is (active, token current, its own machine); OutputLimitExceeded when the
   * attempt's file count leaves no room for another file.
   */
  outputUploadRoom(p: { attemptId: string; token: number; machineId?: string; path: string; policy: OutputPolicy }): Promise<UploadRoom>;
  /** Records an uploaded file (already in the artifact store as `blob`) as the attempt's, fenced as every agent write is (active, token current, its own machine);
   *  with `policy`, refused (OutputLimitExceeded, nothing recorded) when the output limits no longer leave it room. */
  outputUploaded(p: {
    attemptId: string;
    token: number;
    machineId?: string;
    path: string;
    blob: string;
    size: number;
    now: number;
    policy?: OutputPolicy;
  }): Promise<void>;
  /** What these attempts have uploaded. */
  outputUploads(p: { attemptIds: readonly string[] }): Promise<{ attemptId: string; path: string; blob: string; size: number }[]>;
  /** A committed file by the attempt that produced it, through any manifest that still names it (a rerun's reused stage's included); null when none does. */
  committedBlob(p: { attemptId: string; path: string }): Promise<{ blob: string; size: number } | null>;
  /**
   * Whether machine `machineId` may download attempt `attemptId`'s committed outputs: an attempt
   * placed on it and active (scheduled, running) has a stage that needs the stage they are
   * committed for, in its job (docs/security.md: a machine reads only the inputs of its stages).
   */
  machineReadsOutput(p: { machineId: string; attemptId: string }): Promise<boolean>;
  /** Collection's decision (see artifact-verbs.ts): blobs to delete, stages to release under `maxBytes`; their rows go in
   *  this transaction (not with `dryRun`), their files are the caller's to delete. At most `limit` unreferenced blobs a call. */
  artifactsCollect(p: { now: number; maxBytes: number | null; dryRun: boolean; limit?: number; audit?: AuditEntry }): Promise<CollectionPlan>;
  /** Blobs whose files collection kept (written again meanwhile): recorded again, to be judged by a later pass. */
  artifactsKeep(p: { blobs: readonly { blob: string; size: number }[]; now: number }): Promise<void>;
  /** Which of these blob keys have a row (the sweep for files a crash left without one, ArtifactStore.sweepStrays). */
  artifactBlobsKnown(p: { keys: readonly string[] }): Promise<string[]>;

  // --- reconciler ---
  /** Machines silent past `suspectAfterMs` become suspect; past `lostAfterMs`, lost, and their
   *  active attempts lost (stages back to ready, counted against the infrastructure budget).
   *  With `heartbeatMs` (the configured period), each machine's allowances grow with the period its row records (silenceGrowthMs).
   *  With `heard`, a machine whose arrival this replica holds and has not written yet (HeartbeatLiveness.heardAt) is judged
   *  by that arrival when it is the later: its silence is not the liveness loop's lag (docs/failure-detection.md, "Heard, not yet written"). */
  machinesReap(p: { now: number; suspectAfterMs: number; lostAfterMs: number; jitter: number; heartbeatMs?: number; heard?: HeardAt }): Promise<ReapResult>;
  /** Running attempts whose lease ran out, and scheduled ones never acknowledged, become lost. */
  attemptsReap(p: { now: number; ackTimeoutMs: number; jitter: number }): Promise<ReapResult>;
  /** Ready stages whose queueTimeoutSeconds has passed (counted from readiness, or the end of their backoff), at most `limit`. */
  stagesPastQueueTimeout(p: {
    now: number;
    limit: number;
  }): Promise<{ stageId: string; jobId: string; name: string; definition: StageDefinition; waitedMs: number }[]>;
  /** Fails a ready stage that waited past its queue timeout, `reason` as its end reason, and moves its job on (dependents skipped); false when it was no longer ready. */
  stageQueueTimeout(p: { stageId: string; reason: string; now: number }): Promise<boolean>;

  /** Re-evaluates jobs unchanged for `staleAfterMs` (the advancer's safety net), looking at the
   *  next `scan` jobs in id order after `after` (bounded work per pass, whatever the backlog);
   *  returns the ids of jobs it had to move and the cursor for the next pass (null: start over). */
  jobsRepair(p: { now: number; staleAfterMs: number; limit: number; after?: string | null; scan?: number }): Promise<{ moved: string[]; next: string | null }>;

  /** Deletes jobs that ended before `finishedBefore`, with their stages, attempts, events, logs and
   *  references to outputs (at most `limit` jobs), as jobDelete. A retention period, as BullMQ's
   *  removeOnComplete or Argo's ttlStrategy; outputs another job still names stay (docs/rerun.md). */
  jobsExpire(p: { finishedBefore: number; limit: number; now?: number }): Promise<{ jobs: string[] } & DeletedFiles>;

  // --- outbox ---
  /**
   * The oldest `limit` rows not marked published, as their messages: a row holding several (one
   * transaction's) answers each with the row's id and its `part`, in order. With `createdBefore`:
   * only rows written before then (the relay leaves the newest to the replica that wrote them).
   */
  outboxPending(p: { limit: number; createdBefore?: number }): Promise<OutboxMessage[]>;
  outboxMarkPublished(p: { ids: number[]; now: number }): Promise<void>;
  /** Deletes rows published before `before`: the outbox is a hand-off, not a history (events are). */
  outboxPrune(p: { before: number }): Promise<number>;
}

export type { MachineRegistration } from './records.js';

export type { CollectionPlan, DeletedFiles, RerunParams, RerunResult } from './rerun-records.js';

/**
 * A client's Idempotency-Key, whose it is, and a digest of the request it came with. `scope`: the
 * caller the key belongs to (the API's idempotencyScope: a team token's team, an admin token's
 * id); a key is looked up and recorded in its scope only, so the same key from another caller is
 * a fresh key and never answers with that caller's jobs.
 */
export interface Idempotency {
  scope: string;
  key: string;
  requestHash: string;
}

export interface HeartbeatResult {
  health: MachineHealth;
  /** `graceMs`: a preempted attempt's time to checkpoint between TERM and KILL. */
  kill: { attemptId: string; reason: string; graceMs?: number }[];
  /** Attempts found missing from the agent's list and marked lost. */
  lost: string[];
  /** Attempts placed on the machine and not started (assignments), as read with the heartbeat:
   *  none, and the caller need not read assignments until a wake-up says there are. */
  placed: string[];
}

export interface MachineSchedulingChange {
  machine: MachineRecord;
  /** false when the machine already was as asked, and nothing was written. */
  changed: boolean;
  /** drain with stopRunning: the attempts stopped. */
  stopped?: number;
}

export interface AttemptCompletion {
  attemptId: string;
  token: number;
  exitCode: number | null;
  signal: string | null;
  /** How it ended: the kind decides (attempt-end-policy.ts), the detail is recorded as the attempt's reason.
   *  Typed by the API's edge, whichever protocol the agent speaks (legacy-attempt-end.ts). */
  end: AttemptEnd;
  outputs: OutputFile[];
  /** How long each stream's log file was when the process ended; bytes the server lacks are marked missing in the log. */
  logBytes?: { stdout: number; stderr: number };
  /** What it used, from its cgroup (protocol 3): stored with the attempt and carried by its event. Absent: unknown. */
  usage?: AttemptUsage;
}

export interface CompletionResult {
  /** false when this exact outcome had already been recorded (a repeated report). */
  accepted: boolean;
  attempt: AttemptRecord;
  jobState: JobState;
}

/** One report item's answer: see ReportItemResult in the agent protocol. */
export interface ReportItemOutcome {
  attemptId: string;
  result: 'ok' | 'duplicate' | 'stale' | 'refused';
  message?: string;
  jobState?: JobState;
}

export interface MachineReportResult {
  started: ReportItemOutcome[];
  completed: ReportItemOutcome[];
  /** With `startOnPlacement`: the attempts this report's transaction placed on the machine and
   *  wrote `running` (none where its pass did not run, or placed nothing there). */
  startedOnPlacement?: string[];
}

/** What a scheduling pass reads and writes: the store itself, or the store within one transaction. */
export type PlacementSource = Pick<
  Store,
  'clusterView' | 'readyShapes' | 'queueHeads' | 'planApply' | 'schedulerTeams' | 'preemptionView' | 'heldUntil' | 'autoscaleHeldStages' | 'autoscaleHoldClear'
>;

export interface PlanApplyResult {
  applied: AttemptRecord[];
  skipped: { stageId: string; why: string }[];
  /** Attempts preempted (the plan's victims still current when applied). */
  preempted?: string[];
}

/** The latest arrival from a machine that a replica holds and has not written yet (HeartbeatLiveness.heardAt), or undefined. */
export type HeardAt = (machineId: string) => number | undefined;

/** A heartbeat kept in memory: its machine, its arrival, the period its answer gave (absent: the configured one). */
export interface MachineSeen {
  machineId: string;
  at: number;
  periodMs?: number;
}

export interface ReapResult {
  machines: { machineId: string; from: MachineHealth; to: MachineHealth }[];
  lostAttempts: string[];
  /** Machines or attempts the database kept refusing to judge (conflicts), left to the next pass; absent when none. */
  deferred?: number;
  /** The lost-machines duty: the earliest time a machine this pass read silent past its suspect
   *  allowance runs out of its loss allowance (the clock's time); absent when none is. The duty's
   *  loop aims its next pass there (docs/failure-detection.md, "Branch `massloss3`"). */
  lostDueAt?: number;
}
