import { advance, type AttemptOutcome, type StageNode } from '../../advancer/advance.js';
import type { JobState } from '../../domain/job-state.js';
import { isStageTerminal, type StageState } from '../../domain/stage-state.js';
import type { RetryPolicy, StageDefinition } from '../../domain/job-definition.js';
import type { CommittedOutput } from '../records.js';
import type { StagesTable } from '../schema.js';
import { commitManifest } from './output-verbs.js';
import { prepared, preparedList } from './prepared-query.js';
import { syncJobState } from './sync-job-state.js';
import type { Db, EventInput, TxContext } from './tx-context.js';

/** A stored stage as the advancer sees it. */
export function toStageNode(r: Pick<StagesTable, 'name' | 'state' | 'definition' | 'attempts_used' | 'lost_used'>): StageNode {
  const def = JSON.parse(r.definition) as StageDefinition;
  return {
    name: r.name,
    state: r.state,
    needs: def.needs,
    attemptsUsed: Number(r.attempts_used),
    lostUsed: Number(r.lost_used),
    retry: def.retry,
  };
}

/** The columns of a stage the advancer reads and may rewrite. */
export type StageRow = Pick<
  StagesTable,
  | 'id'
  | 'name'
  | 'pool'
  | 'state'
  | 'definition'
  | 'attempts_used'
  | 'lost_used'
  | 'current_attempt_id'
  | 'output_attempt_id'
  | 'ready_since'
  | 'not_before'
  | 'pending_reason'
  | 'end_reason'
  | 'finished_at'
>;

const jobStagesOf = (db: Db) =>
  db
    .selectFrom('stages')
    .innerJoin('jobs', 'jobs.id', 'stages.job_id')
    .select([
      'stages.job_id',
      'stages.id',
      'stages.name',
      'stages.pool',
      'stages.state',
      'stages.definition',
      'stages.attempts_used',
      'stages.lost_used',
      'stages.current_attempt_id',
      'stages.output_attempt_id',
      'stages.ready_since',
      'stages.not_before',
      'stages.pending_reason',
      'stages.end_reason',
      'stages.finished_at',
      'jobs.state as job_state',
      'jobs.cancel_requested_at as job_cancel_requested_at',
    ]);
/** A job's stages, each with its job's state and cancel mark: what syncJobState reads, in the same statement. */
const jobStages = prepared<[jobId: string]>()((db, [jobId]) => jobStagesOf(db).where('stages.job_id', '=', jobId).orderBy('stages.position'));
/**
 * The job ids bound on both tables, not on the stages alone: told only `stages.job_id in (…)`,
 * PostgreSQL without statistics for the tables (a fresh schema, autovacuum yet to analyze them)
 * guessed hundreds of stages for a report's 16 jobs and hashed the whole jobs table to join
 * them, a scan of every job ever submitted in every report's transaction (5.8 ms at 5,000 jobs,
 * the report's longest statement: docs/throughput.md, "B after A: the server's phase,
 * measured"). With the jobs bound too, both tables are read by their indexes, whatever the
 * planner knows.
 */
const manyJobsStages = preparedList((db, jobIds) =>
  jobStagesOf(db).where('stages.job_id', 'in', jobIds).where('jobs.id', 'in', jobIds).orderBy('stages.job_id').orderBy('stages.position'),
);
export type JobStageRows = Awaited<ReturnType<typeof jobStages.rows>>;

/** What applyOutcome reads first, for many jobs in one statement: each job's stages in position order. */
export async function stagesOfJobs(tx: TxContext, jobIds: readonly string[]): Promise<Map<string, JobStageRows>> {
  const out = new Map<string, JobStageRows>();
  for (const r of await manyJobsStages.rows(tx.db, jobIds)) {
    const rows = out.get(r.job_id);
    if (rows) rows.push(r);
    else out.set(r.job_id, [r]);
  }
  return out;
}

/** Every column the advancer may change, written whole from the row read plus the change. */
export type StageWrite = [
  state: StageState,
  updatedAt: number,
  attemptsUsed: number,
  lostUsed: number,
  readySince: number | null,
  notBefore: number | null,
  currentAttemptId: string | null,
  pendingReason: string | null,
  finishedAt: number | null,
  endReason: string | null,
  outputAttemptId: string | null,
  id: string,
  from: StageState,
];
const stageColumns = ([state, updatedAt, attemptsUsed, lostUsed, readySince, notBefore, current, pending, finishedAt, endReason, output]: StageWrite) => ({
  state,
  updated_at: updatedAt,
  attempts_used: attemptsUsed,
  lost_used: lostUsed,
  ready_since: readySince,
  not_before: notBefore,
  current_attempt_id: current,
  pending_reason: pending,
  finished_at: finishedAt,
  end_reason: endReason,
  output_attempt_id: output,
});
const writeStage = prepared<StageWrite>()((db, w) => db.updateTable('stages').set(stageColumns(w)).where('id', '=', w[11]).where('state', '=', w[12]));
/** The trigger's write is fenced on its attempt being still the stage's current one, too. */
const writeTrigger = prepared<[...StageWrite, attemptId: string]>()((db, w) =>
  db
    .updateTable('stages')
    .set(stageColumns(w.slice(0, 13) as unknown as StageWrite))
    .where('id', '=', w[11])
    .where('state', '=', w[12])
    .where('current_attempt_id', '=', w[13]),
);

/**
 * What the advancer needs of a stage's definition (needs, retry policy), parsed once per stage:
 * a definition never changes once stored, and every outcome of a job reads all of its stages.
 * Kept in two generations, as the statement cache is, so it stays bounded.
 */
const parsed = { young: new Map<string, { needs: string[]; retry: RetryPolicy }>(), old: new Map<string, { needs: string[]; retry: RetryPolicy }>() };
const PARSED_GENERATION = 20_000;
function policyOf(r: Pick<StageRow, 'id' | 'definition'>): { needs: string[]; retry: RetryPolicy } {
  let p = parsed.young.get(r.id);
  if (p) return p;
  p = parsed.old.get(r.id);
  if (!p) {
    const def = JSON.parse(r.definition) as StageDefinition;
    p = { needs: def.needs, retry: def.retry };
  }
  if (parsed.young.size >= PARSED_GENERATION) {
    parsed.old = parsed.young;
    parsed.young = new Map();
  }
  parsed.young.set(r.id, p);
  return p;
}

/** One stage's change as the advancer decided it: the row before and after, its guarded write, its event. */
export interface PlannedStageChange {
  before: StageRow;
  next: StageRow;
  write: StageWrite;
  /** The attempt the write is fenced on (the trigger's, still its stage's current one), or null. */
  fencedOn: string | null;
  /** Whether the stage's output pointer moves to the attempt (its manifest goes with it). */
  commitsOutputs: boolean;
  event: EventInput;
}

/** What an outcome does to its job's stages, decided in memory (planOutcome): written by applyOutcome one by one, or by completeMany set-based. */
export interface OutcomePlan {
  changes: PlannedStageChange[];
  /** Pools where a stage became ready to place now. */
  readyPools: Set<string>;
  /** The job's stages as they are once the changes are written, in position order. */
  stagesAfter: StageRow[];
  /** The job's row as read with its stages (undefined: the job has no stage rows). */
  job: { state: string; cancel_requested_at: number | null } | undefined;
}

/**
 * The advancer over a job's stages as read in this transaction, and the rows it would write:
 * pure, so that the same decisions can be written one outcome at a time or many at once.
 */
export function planOutcome(
  rows: JobStageRows,
  p: { jobId: string; stageId: string; attemptId: string | null; outcome: AttemptOutcome; jitter: number; now: number },
): OutcomePlan {
  // The job as read with its stages: nothing below writes its row before its state is synced.
  const job = rows[0] ? { state: rows[0].job_state, cancel_requested_at: rows[0].job_cancel_requested_at } : undefined;
  const trigger = rows.find((r) => r.id === p.stageId);
  // Only the stage's current attempt moves the DAG; an outcome from any other attempt was
  // already fenced off by the caller, and this guard keeps that true for every caller.
  if (!trigger || trigger.current_attempt_id !== p.attemptId) return { changes: [], readyPools: new Set(), stagesAfter: rows, job };
  const nodes: StageNode[] = rows.map((r) => {
    const { needs, retry } = policyOf(r);
    return { name: r.name, state: r.state, needs, attemptsUsed: Number(r.attempts_used), lostUsed: Number(r.lost_used), retry };
  });
  const now = p.now;
  const decided = advance(nodes, { stage: trigger.name, outcome: p.outcome }, now, p.jitter);
  // The rows as written so far: a second change of the same stage starts from the first.
  const byName = new Map<string, StageRow>(rows.map((r) => [r.name, { ...r }]));
  const readyPools = new Set<string>();
  const changes: PlannedStageChange[] = [];
  for (const c of decided) {
    const row = byName.get(c.name)!;
    const isTrigger = row.id === p.stageId;
    const next: StageRow = { ...row, state: c.to };
    if (c.attemptsUsed !== undefined) next.attempts_used = c.attemptsUsed;
    if (c.lostUsed !== undefined) next.lost_used = c.lostUsed;
    if (c.to === 'ready') {
      next.ready_since = now;
      next.not_before = c.notBefore ?? null;
      next.current_attempt_id = null;
      next.pending_reason = c.notBefore && c.notBefore > now ? `${c.reason}: backing off until ${new Date(c.notBefore).toISOString()}` : c.reason;
      if (!c.notBefore || c.notBefore <= now) readyPools.add(row.pool);
    }
    if (isStageTerminal(c.to)) {
      next.finished_at = now;
      next.end_reason = c.reason;
      next.pending_reason = null;
    }
    // The commit of outputs: a pointer to the attempt, written only while it is still current.
    if (c.to === 'succeeded' && isTrigger && p.attemptId !== null) next.output_attempt_id = p.attemptId;
    const write: StageWrite = [
      next.state,
      now,
      Number(next.attempts_used),
      Number(next.lost_used),
      next.ready_since,
      next.not_before,
      next.current_attempt_id,
      next.pending_reason,
      next.finished_at,
      next.end_reason,
      next.output_attempt_id,
      row.id,
      c.from,
    ];
    changes.push({
      before: row,
      next,
      write,
      fencedOn: isTrigger ? p.attemptId : null,
      commitsOutputs: next.output_attempt_id !== row.output_attempt_id && p.attemptId !== null,
      event: {
        type: `stage:${c.to}`,
        jobId: p.jobId,
        stageName: c.name,
        attemptId: isTrigger ? p.attemptId : null,
        message: c.reason ? `stage ${c.name} ${c.to}: ${c.reason}` : `stage ${c.name} ${c.to}`,
        data: { from: c.from, to: c.to, notBefore: c.notBefore ?? null },
      },
    });
    byName.set(c.name, next);
  }
  return { changes, readyPools, stagesAfter: rows.map((r) => byName.get(r.name)!), job };
}

/**
 * After an attempt has been moved to its final state: run the advancer over the attempt's job
 * and write what it decides, in the same transaction. Shared by every way an attempt can end
 * (agent report, lease expiry, machine loss), so the DAG moves the same way whatever ended it.
 */
export async function applyOutcome(
  tx: TxContext,
  /** `attemptId` null: an outcome of the stage itself, not of an attempt (a queue timeout; it has no current attempt). */
  p: {
    jobId: string;
    stageId: string;
    attemptId: string | null;
    outcome: AttemptOutcome;
    jitter: number;
    /** A success's files, resolved to their blobs: its stage's manifest if it commits (docs/rerun.md). */
    outputs?: readonly CommittedOutput[];
    /** The job's stages as read in this transaction (stagesOfJobs), when nothing has written them or the job's row since. */
    stages?: JobStageRows;
  },
): Promise<JobState> {
  const rows = p.stages ?? (await jobStages.rows(tx.db, p.jobId));
  const plan = planOutcome(rows, { ...p, now: tx.now });
  for (const c of plan.changes) {
    const changed = c.fencedOn !== null ? await writeTrigger.affected(tx.db, ...c.write, c.fencedOn) : await writeStage.affected(tx.db, ...c.write);
    if (changed !== 1) {
      throw new Error(`internal: stage ${c.before.name} of job ${p.jobId} changed under the advancer`);
    }
    // The manifest goes with the pointer, in the same transaction: a stage that commits no files writes nothing more.
    if (c.commitsOutputs && p.attemptId !== null && p.outputs?.length) {
      await commitManifest(tx, { stageId: c.before.id, jobId: p.jobId, attemptId: p.attemptId, files: p.outputs });
    }
    await tx.event(c.event);
  }
  for (const pool of plan.readyPools) await tx.publish('pool:ready', { pool });
  // The stages as now written, in position order.
  return syncJobState(tx, p.jobId, plan.stagesAfter, plan.job);
}
