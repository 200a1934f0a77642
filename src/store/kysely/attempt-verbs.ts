import { sql } from 'kysely';
import { type AttemptOutcome, describeFailure } from '../../advancer/advance.js';
import { AttemptEndKind } from '../../domain/attempt-end.js';
import { isSuccessfulEnd } from '../../domain/attempt-end-policy.js';
import { activeAttemptStates, isAttemptActive, type AttemptState } from '../../domain/attempt-state.js';
import { NotFoundError, StaleAttemptError } from '../../domain/errors.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import { maskSecrets } from '../../domain/secret-env.js';
import type { AttemptRecord, AttemptUsage, LogMarks, LogPiece } from '../records.js';
import type { AttemptsTable, LogChunksTable } from '../schema.js';
import { DEFAULT_LOG_CAPS, hardLogBytes, logCutLine, sizeText, type LogCaps } from '../log-caps.js';
import type { AttemptCompletion, CompletionResult } from '../store.js';
import { applyOutcome, type JobStageRows } from './apply-outcome.js';
import { commitsOwnOutputs, endGang, gangSuccess, rankText, stageAttemptId } from './gang-end.js';
import { outputUsage, recordUpload, uploadedOutputs } from './output-verbs.js';
import { overRoom, uploadRoom, type OutputPolicy, type UploadRoom } from '../../domain/output-limits.js';
import { attemptsWithNames } from './job-verbs.js';
import { syncJobsOnActivation, syncJobStateOnActivation } from './sync-job-state.js';
import { prepared, preparedBySize } from './prepared-query.js';
import type { Db, EventInput, Trx, TxContext } from './tx-context.js';
import type { Loss } from './lose-many.js';
import { StartsNeedSerializable } from './starts-read-committed.js';

const attemptById = prepared<[id: string]>()((db, [id]) => db.selectFrom('attempts').selectAll().where('id', '=', id));

async function load(db: Db | Trx, attemptId: string): Promise<AttemptsTable> {
  const a = await attemptById.first(db, attemptId);
  if (!a) throw new NotFoundError('attempt', attemptId);
  return a;
}

const recordPid = prepared<[pid: number, id: string]>()((db, [pid, id]) => db.updateTable('attempts').set({ pid }).where('id', '=', id));
const startAttempt = prepared<[at: number, pid: number | null, leaseExpiresAt: number, id: string, token: number]>()((db, [at, pid, lease, id, token]) =>
  db
    .updateTable('attempts')
    .set({ state: 'running', started_at: at, pid, lease_expires_at: lease })
    .where('id', '=', id)
    .where('token', '=', token)
    .where('state', '=', 'scheduled'),
);
const startStage = prepared<[at: number, id: string, attemptId: string]>()((db, [at, id, attemptId]) =>
  db
    .updateTable('stages')
    .set({ state: 'running', updated_at: at })
    .where('id', '=', id)
    .where('state', '=', 'scheduled')
    .where('current_attempt_id', '=', attemptId),
);
const machineName = prepared<[id: string]>()((db, [id]) => db.selectFrom('machines').select('name').where('id', '=', id));
const jobStateOf = prepared<[id: string]>()((db, [id]) => db.selectFrom('jobs').select('state').where('id', '=', id));
const completeAttempt = prepared<
  [
    state: AttemptState,
    exitCode: number | null,
    signal: string | null,
    reason: string | null,
    endKind: AttemptEndKind,
    outputs: string | null,
    memoryPeakBytes: number | null,
    cpuSeconds: number | null,
    at: number,
    startedAt: number,
    id: string,
    token: number,
  ]
>()((db, [state, exitCode, signal, reason, endKind, outputs, memoryPeakBytes, cpuSeconds, at, startedAt, id, token]) =>
  db
    .updateTable('attempts')
    .set({
      state,
      exit_code: exitCode,
      signal,
      reason,
      end_kind: endKind,
      outputs,
      memory_peak_bytes: memoryPeakBytes,
      cpu_seconds: cpuSeconds,
      finished_at: at,
      lease_expires_at: null,
      started_at: startedAt,
      // The agent reports an outcome only after the process is gone.
      released_at: at,
    })
    .where('id', '=', id)
    .where('token', '=', token)
    .where('state', 'in', activeAttemptStates),
);

/** A machine speaks only for the attempts placed on it (the report route says the same per item). */
function ownedBy(a: AttemptsTable, machineId: string | undefined): void {
  if (machineId !== undefined && a.machine_id !== machineId) throw new StaleAttemptError(a.id, `attempt is placed on another machine, not ${machineId}`);
}

async function one(db: Db | Trx, row: AttemptsTable): Promise<AttemptRecord> {
  return (await attemptsWithNames(db, [row]))[0]!;
}

/** The fence: a report must name the attempt's own token, and the attempt must still be active. */
/**
 * The columns of an attempt that recording its start or its outcome reads: what a batched report
 * loads for each of its items (report-verbs.ts), not the whole row (its resources, progress and
 * times are not needed there, and building them was most of that read's cost).
 */
export const REPORTED_ATTEMPT_COLUMNS = [
  'id',
  'stage_id',
  'job_id',
  'stage_name',
  'number',
  'token',
  'machine_id',
  'state',
  'reason',
  'exit_code',
  'pid',
  'started_at',
  'log_bytes',
  'stdout_bytes',
  'stderr_bytes',
  'log_cut_bytes',
  'gang_id',
  'gang_rank',
  'gang_size',
] as const satisfies readonly (keyof AttemptsTable)[];
export type ReportedAttempt = Pick<AttemptsTable, (typeof REPORTED_ATTEMPT_COLUMNS)[number]>;

function fence(a: Pick<AttemptsTable, 'id' | 'token' | 'state' | 'reason'>, token: number): void {
  if (Number(a.token) !== token) throw new StaleAttemptError(a.id, `token ${token} is stale (current ${a.token})`);
  if (!isAttemptActive(a.state)) throw new StaleAttemptError(a.id, `attempt is ${a.state}${a.reason ? ` (${a.reason})` : ''}`);
}

export async function attemptStart(
  tx: TxContext,
  p: { attemptId: string; token: number; pid: number | null; leaseMs: number; machineId?: string },
): Promise<AttemptRecord> {
  const a = await load(tx.db, p.attemptId);
  ownedBy(a, p.machineId);
  await startLoaded(tx, a, p);
  return one(tx.db, await load(tx.db, a.id));
}

/**
 * The acknowledgement of an assignment (pid null, before the spawn) or the pid recorded after it:
 * scheduled → running, fenced. A repeat (the agent resent after a lost reply) records a new pid.
 * `machineName` names the machine in the event, when the caller knows it.
 */
export async function startLoaded(
  tx: TxContext,
  a: ReportedAttempt,
  p: {
    token: number;
    pid: number | null;
    leaseMs: number;
    machineName?: string;
    /** The job's state as the caller read it in this transaction, when nothing has written its row since. */
    jobState?: string;
  },
): Promise<'ok' | 'duplicate'> {
  fence(a, p.token);
  if (a.state === 'running') {
    if (p.pid !== null && a.pid === null) await recordPid.affected(tx.db, p.pid, a.id);
    return 'duplicate';
  }
  if ((await startAttempt.affected(tx.db, tx.now, p.pid, tx.now + p.leaseMs, a.id, p.token)) !== 1) {
    throw new StaleAttemptError(a.id, 'attempt changed while starting');
  }
  // A gang's stage runs once any member does: its current attempt is rank 0's.
  await startStage.affected(tx.db, tx.now, a.stage_id, stageAttemptId(a));
  const name = p.machineName ?? (await machineName.first(tx.db, a.machine_id))?.name;
  await runningEvent(tx, a, name ?? a.machine_id, p.pid);
  await syncJobStateOnActivation(tx, a.job_id, 'running', p.jobState);
  return 'ok';
}

/** The event of an attempt's start. */
async function runningEvent(tx: TxContext, a: ReportedAttempt, machine: string, pid: number | null): Promise<void> {
  await tx.event({
    type: 'attempt:running',
    jobId: a.job_id,
    stageName: a.stage_name,
    attemptId: a.id,
    machineId: a.machine_id,
    message: `stage ${a.stage_name} attempt ${a.number}${rankText(a)} running on ${machine}`,
    data: { pid },
  });
}

/** Rows per batched start statement (each list's ids are bound parameters). */
const STARTS_PER_STATEMENT = 64;
const startAttempts = preparedBySize(STARTS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [at, lease, ...ids]) =>
    db
      .updateTable('attempts')
      .set({ state: 'running', started_at: at as number, pid: null, lease_expires_at: lease as number })
      .where('id', 'in', ids.slice(0, n) as string[])
      .where('state', '=', 'scheduled')
      .returning('id'),
  ),
);
/** Guarded as startStage is: still scheduled, its current attempt one of these (a stage has one current attempt, and these are each another stage's). */
const startStages = preparedBySize(STARTS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [at, ...ids]) =>
    db
      .updateTable('stages')
      .set({ state: 'running', updated_at: at as number })
      .where('id', 'in', ids.slice(0, n) as string[])
      .where('state', '=', 'scheduled')
      .where('current_attempt_id', 'in', ids.slice(n, 2 * n) as string[]),
  ),
);

/**
 * Acknowledgements of many assignments at once (a batched report's first run, report-verbs.ts):
 * what startLoaded does for each, in one statement per table instead of one per item. Only for
 * the plain case: an attempt of no gang, scheduled, its token the report's, acknowledged before
 * its spawn (no pid), and no other item of the report about it or its job. Returns the ids started;
 * an attempt the guarded update did not find scheduled is not among them (stale, as in startLoaded),
 * and nothing of it was written.
 */
export async function startMany(
  tx: TxContext,
  items: readonly (ReportedAttempt & { job_state: string })[],
  p: {
    leaseMs: number;
    machineName: string;
    /**
     * READ COMMITTED (starts-read-committed.ts): every row must be found as it was read, or
     * StartsNeedSerializable. A start that found its attempt taken by a resent copy of the same
     * acknowledgement would answer `stale` where SERIALIZABLE answers `duplicate`, and its agent
     * would drop a running attempt (found in review).
     */
    readCommitted?: boolean;
  },
): Promise<Set<string>> {
  const ok = new Set<string>();
  for (let i = 0; i < items.length; i += STARTS_PER_STATEMENT) {
    const part = items.slice(i, i + STARTS_PER_STATEMENT);
    const ids = part.map((a) => a.id);
    const before = ok.size;
    for (const r of await startAttempts(part.length).rows(tx.db, tx.now, tx.now + p.leaseMs, ...ids)) ok.add(r.id);
    if (p.readCommitted && ok.size - before < part.length) throw new StartsNeedSerializable('an attempt changed since it was read');
    const moved = part.filter((a) => ok.has(a.id));
    if (!moved.length) continue;
    const stages = await startStages(moved.length).affected(tx.db, tx.now, ...moved.map((a) => a.stage_id), ...moved.map((a) => a.id));
    if (p.readCommitted && stages < moved.length) throw new StartsNeedSerializable('a stage changed since it was read');
  }
  const moved = items.filter((a) => ok.has(a.id));
  for (const a of moved) await runningEvent(tx, a, p.machineName, null);
  // Each job once (several of a job only in a report of starts alone, read in one statement: one
  // state read for all): one guarded update per state they move from.
  const jobs = new Map(moved.map((a) => [a.job_id, { id: a.job_id, state: a.job_state }]));
  await syncJobsOnActivation(tx, [...jobs.values()], 'running', p.readCommitted === true);
  return ok;
}

/**
 * An agent's outcome report. Exactly one report per attempt changes anything: the one that finds
 * the attempt active with this token. A repeat of an accepted report returns `accepted: false`
 * (so the agent can stop retrying); a report for an attempt that ended otherwise (canceled,
 * lost, superseded) is refused with StaleAttemptError, and its outputs are never committed.
 */
export async function attemptComplete(tx: TxContext, p: AttemptCompletion & { jitter: number; machineId?: string }): Promise<CompletionResult> {
  const a = await load(tx.db, p.attemptId);
  ownedBy(a, p.machineId);
  const r = await completeLoaded(tx, a, p);
  return { accepted: r.accepted, attempt: await one(tx.db, await load(tx.db, a.id)), jobState: r.jobState };
}

export async function completeLoaded(
  tx: TxContext,
  a: ReportedAttempt,
  p: Omit<AttemptCompletion, 'attemptId'> & {
    jitter: number;
    /** Its job's stages as read in this transaction (stagesOfJobs), when nothing else of it is written before its outcome applies. */
    stages?: JobStageRows;
  },
): Promise<{ accepted: boolean; jobState: CompletionResult['jobState'] }> {
  const { succeeded, state, outputs, outcome, what } = outcomeOf(p);
  if (Number(a.token) === p.token && a.state === state && a.exit_code === p.exitCode) {
    const job = await jobStateOf.first(tx.db, a.job_id);
    if (!job) throw new NotFoundError('job', a.job_id);
    return { accepted: false, jobState: job.state };
  }
  fence(a, p.token);
  // Only files this attempt uploaded, whole, can be committed (read only when it names some); of a
  // gang, only rank 0's are unless its stage asks for every rank's (docs/gangs.md, "Outputs"): the
  // other ranks' uploads are then kept, not committed.
  const commits = succeeded && p.outputs.length > 0 && (await commitsOwnOutputs(tx, a));
  const files = commits ? await uploadedOutputs(tx, a.id, p.outputs) : [];
  const detail = p.end.detail;
  const changed = await completeAttempt.affected(
    tx.db,
    state,
    p.exitCode,
    p.signal,
    detail,
    p.end.kind,
    outputs,
    p.usage?.memoryPeakBytes ?? null,
    p.usage?.cpuSeconds ?? null,
    tx.now,
    a.started_at ?? tx.now,
    a.id,
    p.token,
  );
  if (changed !== 1) throw new StaleAttemptError(a.id, 'attempt changed while completing');
  // A gang's member: a success waits for the other ranks; anything else ends them (gang-end.ts).
  const gang = a.gang_id !== null && succeeded ? await gangSuccess(tx, a) : null;
  const waiting = gang && !gang.complete ? `; waiting for rank${gang.waiting.length > 1 ? 's' : ''} ${gang.waiting.join(', ')}` : '';
  // The log is whole by now (the agent ships it, its tail included, before the outcome): its end's event says whether it was cut.
  const logCut = p.logBytes ? await markMissingLog(tx, a, p.logBytes) : await markNoTail(tx, a);
  await tx.event(outcomeEvent(a, p, `${what}${waiting}`, logCut));
  await tx.publish('capacity:freed', { machineId: a.machine_id });
  if (a.gang_id !== null && !succeeded) await endGang(tx, a, what);
  if (gang && !gang.complete) {
    const job = await jobStateOf.first(tx.db, a.job_id);
    if (!job) throw new NotFoundError('job', a.job_id);
    return { accepted: true, jobState: job.state };
  }
  const jobState = await applyOutcome(tx, {
    jobId: a.job_id,
    stageId: a.stage_id,
    attemptId: stageAttemptId(a),
    outcome,
    jitter: p.jitter,
    outputs: gang?.complete ? gang.outputs : files,
    ...(p.stages && a.gang_id === null ? { stages: p.stages } : {}),
  });
  return { accepted: true, jobState };
}

/** What an outcome's attempt row becomes (completeAttempt's values, without the fence): shared with completeMany. */
export function outcomeOf(p: Omit<AttemptCompletion, 'attemptId'>): {
  succeeded: boolean;
  state: AttemptState;
  outputs: string | null;
  outcome: AttemptOutcome;
  what: string;
} {
  const succeeded = isSuccessfulEnd(p);
  const detail = p.end.detail;
  return {
    succeeded,
    state: succeeded ? 'succeeded' : 'failed',
    outputs: succeeded ? JSON.stringify(p.outputs) : null,
    outcome: succeeded ? { kind: 'succeeded' } : { kind: 'failed', end: p.end.kind, exitCode: p.exitCode, signal: p.signal, detail },
    what: succeeded ? 'succeeded' : `failed (${describeFailure({ ...p, detail })})`,
  };
}

/** The event of an attempt's end as its agent reported it; `what` says how it ended, `logCut` the bytes its log lost (null: none). */
export function outcomeEvent(a: ReportedAttempt, p: Omit<AttemptCompletion, 'attemptId'>, what: string, logCut: number | null): EventInput {
  const succeeded = isSuccessfulEnd(p);
  return {
    type: `attempt:${succeeded ? 'succeeded' : 'failed'}`,
    jobId: a.job_id,
    stageName: a.stage_name,
    attemptId: a.id,
    machineId: a.machine_id,
    message: `stage ${a.stage_name} attempt ${a.number}${rankText(a)} ${what}`,
    data: {
      exitCode: p.exitCode,
      signal: p.signal,
      reason: p.end.detail,
      end: p.end.kind,
      outputs: succeeded ? p.outputs.length : 0,
      ...(logCut ? { logCutBytes: logCut } : {}),
      // What it used, where its agent could measure it: a reader of the stream sees an OOM's peak without a second read.
      ...(usageKnown(p.usage) ? { usage: { memoryPeakBytes: p.usage.memoryPeakBytes, cpuSeconds: p.usage.cpuSeconds } } : {}),
    },
  };
}

/**
 * The bytes an outcome's log lost, when recording the outcome writes nothing for its log (no line
 * marking a missing end or a missing tail: markMissingLog and markNoTail would each write none);
 * undefined where it would write, and the outcome must go completeLoaded's way.
 */
export function logCutWithoutWrites(a: ReportedAttempt, wrote: AttemptCompletion['logBytes']): number | null | undefined {
  if (wrote) {
    const missing = wrote.stdout > Number(a.stdout_bytes) || wrote.stderr > Number(a.stderr_bytes);
    if (missing) return undefined;
    return a.log_cut_bytes === null ? null : Number(a.log_cut_bytes);
  }
  return a.log_cut_bytes === null ? null : undefined;
}

function usageKnown(u: AttemptUsage | undefined): u is AttemptUsage {
  return u !== undefined && (u.memoryPeakBytes !== null || u.cpuSeconds !== null);
}

/**
 * The outcome came with less of the log than the process wrote (the agent could not ship the rest:
 * the server refused it for good): the log says so where it ends, never silently. Past the head's
 * cap the missing end is a cut (an agent from before tails ships none, and deletes its files once
 * the server says capped): counted, marked and told as one. Answers the bytes cut, as the attempt
 * now holds them (null: its head never filled the cap).
 */
async function markMissingLog(tx: TxContext, a: ReportedAttempt, wrote: { stdout: number; stderr: number }): Promise<number | null> {
  let cut = a.log_cut_bytes === null ? null : Number(a.log_cut_bytes);
  const missing = (['stdout', 'stderr'] as const)
    .map((stream) => ({ stream, from: Number(stream === 'stdout' ? a.stdout_bytes : a.stderr_bytes), to: wrote[stream] }))
    .filter((m) => m.to > m.from);
  if (missing.length === 0) return cut;
  const rows = missing.map((m) => ({
    attempt_id: a.id,
    stream: m.stream,
    at: tx.now,
    data:
      cut === null
        ? `\n[gantry: the last ${m.to - m.from} bytes of ${m.stream} were not shipped; the machine's log file has them]\n`
        : logCutLine(m.stream, m.from, m.to, false),
    byte_offset: null,
  }));
  await tx.db.insertInto('log_chunks').values(rows).execute();
  if (cut === null) return null;
  for (const m of missing) {
    cut += m.to - m.from;
    await logCutEvent(tx, a, m, 'its end was not shipped');
  }
  await tx.db.updateTable('attempts').set({ log_cut_bytes: cut, stdout_bytes: wrote.stdout, stderr_bytes: wrote.stderr }).where('id', '=', a.id).execute();
  return cut;
}

/**
 * The head filled and the outcome came without the files' sizes: an agent from before tails (one
 * of today sends them whenever its head is full), which stopped shipping at the cap and ships no
 * tail. How much it dropped is unknown; the log says where it stops, never silently.
 */
async function markNoTail(tx: TxContext, a: ReportedAttempt): Promise<number | null> {
  if (a.log_cut_bytes === null) return null;
  const stream = Number(a.stdout_bytes) >= Number(a.stderr_bytes) ? 'stdout' : 'stderr';
  const data = `\n[gantry: log truncated past its head (${sizeText(Number(a.log_bytes))}); its agent ships no tail, and did not say how much it wrote]\n`;
  await tx.db.insertInto('log_chunks').values({ attempt_id: a.id, stream, at: tx.now, data, byte_offset: null }).execute();
  return Number(a.log_cut_bytes);
}

/**
 * The server ends an attempt its agent still runs (lost, preempted): guarded on the token and
 * state read, so an attempt that moved meanwhile is left alone (false). Its resources stay held
 * until its agent stops listing it.
 */
export async function endActiveAttempt(tx: TxContext, a: AttemptsTable, state: 'lost' | 'preempted', reason: string, overdue?: OverdueGuard): Promise<boolean> {
  let q = tx.db
    .updateTable('attempts')
    // The attempt's state names its end here: lost or preempted, by the control plane.
    .set({ state, reason, end_kind: state === 'lost' ? AttemptEndKind.lost : AttemptEndKind.preempted, finished_at: tx.now, lease_expires_at: null })
    .where('id', '=', a.id)
    .where('token', '=', a.token)
    .where('state', '=', a.state);
  // Read outside this transaction (overdueAttempts): the lease or the acknowledgement is checked
  // again in the write, so a heartbeat that renewed the lease since leaves the attempt running.
  if (overdue?.leaseBefore !== undefined) q = q.where('lease_expires_at', '<', overdue.leaseBefore);
  if (overdue?.scheduledBefore !== undefined) q = q.where('scheduled_at', '<', overdue.scheduledBefore);
  const res = await q.executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}

/** What makes an attempt read outside the transaction still overdue when it is written (endActiveAttempt). */
export interface OverdueGuard {
  /** A running attempt's lease ran out before this time. */
  leaseBefore?: number;
  /** A scheduled attempt was placed before this time and never acknowledged. */
  scheduledBefore?: number;
}

/** Marks an active attempt lost and lets the advancer put its stage back in the queue. */
export async function loseAttempt(tx: TxContext, a: AttemptsTable, reason: string, jitter: number, charged = true, overdue?: OverdueGuard): Promise<boolean> {
  if (!(await endActiveAttempt(tx, a, 'lost', reason, overdue))) return false;
  await lostSaid(tx, a, reason);
  // A gang's member lost ends the gang: the other members stop, and the loss is charged once.
  await endGang(tx, a, `lost: ${reason}`);
  await applyOutcome(tx, {
    jobId: a.job_id,
    stageId: a.stage_id,
    attemptId: stageAttemptId(a),
    outcome: { kind: 'lost', reason, ...(charged ? {} : { charged: false }) },
    jitter,
  });
  return true;
}

/** What a loss says once its attempt's row is written (loseAttempt, loseMany): its event, and its machine woken. */
export async function lostSaid(tx: TxContext, a: AttemptsTable, reason: string): Promise<void> {
  await tx.event({
    type: 'attempt:lost',
    jobId: a.job_id,
    stageName: a.stage_name,
    attemptId: a.id,
    machineId: a.machine_id,
    message: `stage ${a.stage_name} attempt ${a.number}${rankText(a)} lost: ${reason}`,
    // The end's kind, as an outcome's event carries it (attempt:failed): what a reader of the stream decides on.
    data: { end: AttemptEndKind.lost },
  });
  // Its resources stay held until the agent stops listing it (machineHeartbeat releases them and
  // says so then); the wake-up tells the agent to kill it.
  await tx.publish('machine:wake', { machineId: a.machine_id });
}

/** An attempt past its lease (running) or its acknowledgement (scheduled), as the lost-attempts duty read it. */
export interface OverdueAttempt {
  attempt: AttemptsTable;
  why: 'lease' | 'ack';
}

/**
 * Running attempts whose lease ran out and scheduled ones never acknowledged, read outside any
 * transaction and judged afterwards a batch to a transaction, each with a guarded write
 * (`attemptReap`; docs/failure-detection.md, "A mass loss"). In one SERIALIZABLE transaction with
 * every loss in it, a rack's 500 attempts and the pass placing their stages, the read depended on
 * every lease a heartbeat renewed meanwhile and its writes held the rows the machine reaper was
 * losing too: at 5,000 agents on PostgreSQL x 2 with 500 machines stopped it gave up 8 passes in a
 * row (StoreBusyError) and held back the reaper's batches. Ordered by machine and id, the order in
 * which the machine reaper takes the same rows, so the two never wait on each other in a circle.
 */
export async function overdueAttempts(db: Db, p: { now: number; ackTimeoutMs: number }): Promise<OverdueAttempt[]> {
  const expired = await db.selectFrom('attempts').selectAll().where('state', '=', 'running').where('lease_expires_at', '<', p.now).execute();
  const unacked = await db
    .selectFrom('attempts')
    .selectAll()
    .where('state', '=', 'scheduled')
    .where('scheduled_at', '<', p.now - p.ackTimeoutMs)
    .execute();
  const out: OverdueAttempt[] = [
    ...expired.map((attempt) => ({ attempt, why: 'lease' as const })),
    ...unacked.map((attempt) => ({ attempt, why: 'ack' as const })),
  ];
  return out.sort((x, y) => byMachineThenId(x.attempt, y.attempt));
}

/** The one order in which both reapers take attempts' rows (machine, then attempt). */
function byMachineThenId(x: { machine_id: string; id: string }, y: { machine_id: string; id: string }): number {
  return x.machine_id < y.machine_id ? -1 : x.machine_id > y.machine_id ? 1 : x.id < y.id ? -1 : x.id > y.id ? 1 : 0;
}

/** An overdue attempt as a loss (loseMany), guarded on still being overdue at this transaction's time (a lease renewed since, or an acknowledgement, keeps it). */
export function overdueLoss(o: OverdueAttempt, p: { ackTimeoutMs: number; now: number }): Loss {
  if (o.why === 'lease') return { a: o.attempt, reason: 'lease expired without renewal', overdue: { leaseBefore: p.now } };
  return { a: o.attempt, reason: `assignment not acknowledged within ${p.ackTimeoutMs} ms`, overdue: { scheduledBefore: p.now - p.ackTimeoutMs } };
}

/**
 * Pieces of an attempt's output, each at its byte offset in its stream (docs/agent.md, "Logs").
 * A piece the server already has (it ends at or before the stream's mark) is ignored: the agent
 * resends whatever it is not sure of, and nothing is stored twice. A piece that does not start at
 * the mark (a gap, or a different cut of bytes already taken) is not taken either, nor is anything
 * after it in that stream: the answer says where the stream ends, and the agent ships on from there.
 *
 * Logs keep both ends: once the attempt's log has filled its head (`caps.headBytes`), pieces shipped
 * as it runs are no longer taken (the answer says `capped`, with the tail's size, and the agent
 * stops shipping); once its process has ended, the agent ships each stream's last bytes as `tail`
 * pieces. A tail piece may start past the mark: the bytes between are the cut, counted in the
 * attempt's `log_cut_bytes`, marked by a line where they were (logCutLine) and told by an
 * `attempt:log-cut` event, all in this transaction, so a resend finds the mark moved and cuts nothing twice.
 */
export async function attemptLogAppend(
  tx: TxContext,
  p: { attemptId: string; token: number; chunks: LogPiece[]; machineId?: string; caps?: LogCaps },
): Promise<LogMarks> {
  const caps = p.caps ?? DEFAULT_LOG_CAPS;
  const a = await load(tx.db, p.attemptId);
  ownedBy(a, p.machineId);
  // Logs are accepted after the attempt ends (an agent restarted after the outcome was recorded
  // may still be shipping), but only from the holder of its token.
  if (Number(a.token) !== p.token) throw new StaleAttemptError(a.id, `token ${p.token} is stale (current ${a.token})`);
  const ends = { stdout: Number(a.stdout_bytes), stderr: Number(a.stderr_bytes) };
  const blocked = { stdout: false, stderr: false };
  // Null until the head is full; then the bytes dropped between the head and the tail.
  const cutBefore = a.log_cut_bytes === null ? null : Number(a.log_cut_bytes);
  let cut = cutBefore;
  let stored = Number(a.log_bytes);
  const hard = hardLogBytes(caps);
  const rows: Omit<LogChunksTable, 'id'>[] = [];
  const cuts: { stream: LogPiece['stream']; from: number; to: number }[] = [];
  const secrets = await secretsOf(tx.db, a.stage_id);
  for (const c of p.chunks) {
    if (blocked[c.stream] || c.offset + c.bytes <= ends[c.stream]) continue;
    // Past the mark: only a tail piece, once the head is full (an earlier piece is missing otherwise).
    const skips = c.offset > ends[c.stream] && c.tail === true && cut !== null;
    // A piece shipped as the process runs, once the head is full: not taken (the agent ships the tail at the end).
    const late = c.tail !== true && cut !== null;
    if ((c.offset !== ends[c.stream] && !skips) || late) {
      blocked[c.stream] = true;
      continue;
    }
    if (skips) {
      const line = logCutLine(c.stream, ends[c.stream], c.offset);
      rows.push({ attempt_id: a.id, stream: c.stream, at: tx.now, data: line, byte_offset: null });
      stored += Buffer.byteLength(line);
      cuts.push({ stream: c.stream, from: ends[c.stream], to: c.offset });
      cut! += c.offset - ends[c.stream];
      ends[c.stream] = c.offset;
    }
    ends[c.stream] += c.bytes;
    // Only an agent that ships past the head and the tail gets here: its bytes count as taken (so it
    // moves on) but are not stored, and the log says so once.
    if (stored > hard) continue;
    // What the command printed of its secrets is kept masked (the offsets still count its bytes).
    const text = secrets.length ? maskSecrets(c.data, secrets) : c.data;
    const size = Buffer.byteLength(text);
    const room = hard - stored;
    const data = size <= room ? text : `${Buffer.from(text).subarray(0, room).toString()}\n[gantry: log truncated at ${sizeText(hard)}]\n`;
    // Past the hard cap by the marker's length: later pieces are only counted.
    stored += size <= room ? size : room + 1;
    rows.push({ attempt_id: a.id, stream: c.stream, at: tx.now, data, byte_offset: c.offset });
    // The head is full: from now on only the tail is taken.
    if (stored >= caps.headBytes) cut ??= 0;
  }
  if (rows.length) await tx.db.insertInto('log_chunks').values(rows).execute();
  if (ends.stdout !== Number(a.stdout_bytes) || ends.stderr !== Number(a.stderr_bytes) || cut !== cutBefore) {
    await tx.db
      .updateTable('attempts')
      .set({ log_bytes: stored, stdout_bytes: ends.stdout, stderr_bytes: ends.stderr, log_cut_bytes: cut })
      .where('id', '=', a.id)
      .execute();
  }
  for (const k of cuts) await logCutEvent(tx, a, k, 'the tail follows');
  return { ...ends, capped: cut !== null, ...(cut !== null ? { tailBytes: caps.tailBytes } : {}) };
}

/** A cut of an attempt's log, as an event: a follower of the events learns its log is not whole. */
async function logCutEvent(
  tx: TxContext,
  a: Pick<AttemptsTable, 'id' | 'job_id' | 'stage_name' | 'machine_id' | 'number'>,
  k: { stream: LogPiece['stream']; from: number; to: number },
  then: string,
): Promise<void> {
  await tx.event({
    type: 'attempt:log-cut',
    jobId: a.job_id,
    stageName: a.stage_name,
    attemptId: a.id,
    machineId: a.machine_id,
    message: `stage ${a.stage_name} attempt ${a.number} log cut: ${sizeText(k.to - k.from)} of ${k.stream} dropped between its head and its end; ${then}`,
    data: { stream: k.stream, fromByte: k.from, toByte: k.to, bytes: k.to - k.from },
  });
}

const stageDefinition = prepared<[id: string]>()((db, [id]) => db.selectFrom('stages').select('definition').where('id', '=', id));
/** Each stage's secretEnv values, once read (a definition never changes); bounded, as the statement cache is.
 *  What masks a stage's log here and its progress messages (machine-verbs.ts). */
const secretsByStage = new Map<string, string[]>();
export async function secretsOf(db: Db | Trx, stageId: string): Promise<string[]> {
  let s = secretsByStage.get(stageId);
  if (s) return s;
  const row = await stageDefinition.first(db, stageId);
  const def = row ? (JSON.parse(row.definition) as StageDefinition) : null;
  s = Object.values(def?.secretEnv ?? {});
  if (secretsByStage.size >= 10_000) secretsByStage.clear();
  secretsByStage.set(stageId, s);
  return s;
}

/** The most bytes an upload of `path` may have under the output limits (OutputLimitExceeded when no file fits), fenced as every agent write is. */
export async function outputUploadRoom(
  db: Db,
  p: { attemptId: string; token: number; machineId?: string; path: string; policy: OutputPolicy },
): Promise<UploadRoom> {
  const a = await load(db, p.attemptId);
  ownedBy(a, p.machineId);
  fence(a, p.token);
  return uploadRoom(await outputUsage(db, a, p.path, p.policy), p.path);
}

/**
 * An output file in the artifact store as `blob`, recorded as this attempt's upload of `path`:
 * fenced as every agent write is. With `policy`, checked again against the output limits in the
 * transaction (two uploads of one attempt, or two attempts of one team, each found room before
 * either was recorded): over them, OutputLimitExceeded and nothing recorded.
 */
export async function outputUploaded(
  tx: TxContext,
  p: { attemptId: string; token: number; machineId?: string; path: string; blob: string; size: number; policy?: OutputPolicy },
): Promise<void> {
  const a = await load(tx.db, p.attemptId);
  ownedBy(a, p.machineId);
  fence(a, p.token);
  if (p.policy) {
    const room = uploadRoom(await outputUsage(tx.db, a, p.path, p.policy), p.path);
    if (p.size > room.bytes) throw overRoom(room, p.path, p.size);
  }
  await recordUpload(tx, p);
}

export async function attemptGet(db: Db, attemptId: string): Promise<AttemptRecord | null> {
  const a = await db.selectFrom('attempts').selectAll().where('id', '=', attemptId).executeTakeFirst();
  return a ? one(db, a) : null;
}

/** Ready stages past their queue timeout (the partial index stages_queue_timeout holds only stages that set one). */
export async function stagesPastQueueTimeout(db: Db, p: { now: number; limit: number }) {
  const rows = await db
    .selectFrom('stages')
    .select(['id', 'job_id', 'name', 'definition', 'ready_since', 'not_before', 'queue_timeout_ms'])
    .where('state', '=', 'ready')
    .where('queue_timeout_ms', 'is not', null)
    .where(sql<number>`coalesce(not_before, ready_since) + queue_timeout_ms`, '<', p.now)
    .limit(p.limit)
    .execute();
  return rows.map((r) => ({
    stageId: r.id,
    jobId: r.job_id,
    name: r.name,
    definition: JSON.parse(r.definition) as StageDefinition,
    waitedMs: p.now - Math.max(Number(r.ready_since ?? 0), Number(r.not_before ?? 0)),
  }));
}

/** A ready stage that waited too long fails for good; the advancer skips what depends on it and ends the job. */
export async function stageQueueTimeout(tx: TxContext, p: { stageId: string; reason: string }): Promise<boolean> {
  const row = await tx.db.selectFrom('stages').select(['job_id', 'state', 'current_attempt_id']).where('id', '=', p.stageId).executeTakeFirst();
  if (!row || row.state !== 'ready' || row.current_attempt_id !== null) return false;
  await applyOutcome(tx, { jobId: row.job_id, stageId: p.stageId, attemptId: null, outcome: { kind: 'queue-timeout', reason: p.reason }, jitter: 0 });
  return true;
}
