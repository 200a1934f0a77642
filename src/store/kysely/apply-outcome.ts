import { advance, type AttemptOutcome, type StageNode } from '../../advancer/advance.js';
import type { JobState } from '../../domain/job-state.js';
import { isStageTerminal, type StageState } from '../../domain/stage-state.js';
import type { RetryPolicy, StageDefinition } from '../../domain/job-definition.js';
import type { CommittedOutput } from '../records.js';
import type { StagesTable } from '../schema.js';
import { commitManifest } from './output-verbs.js';
import { prepared, preparedList } from './prepared-query.js';
import { syncJobState } from './sync-job-state.js';
import type { Db, TxContext } from './tx-context.js';

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
type StageRow = Pick<
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
const manyJobsStages = preparedList((db, jobIds) => jobStagesOf(db).where('stages.job_id', 'in', jobIds).orderBy('stages.job_id').orderBy('stages.position'));
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
type StageWrite = [
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
  // The job as read with its stages: nothing below writes its row before syncJobState does.
  const job = rows[0] ? { state: rows[0].job_state, cancel_requested_at: rows[0].job_cancel_requested_at } : undefined;
  const trigger = rows.find((r) => r.id === p.stageId);
  // Only the stage's current attempt moves the DAG; an outcome from any other attempt was
  // already fenced off by the caller, and this guard keeps that true for every caller.
  if (!trigger || trigger.current_attempt_id !== p.attemptId) return syncJobState(tx, p.jobId, rows, job);
  const nodes: StageNode[] = rows.map((r) => {
    const { needs, retry } = policyOf(r);
    return { name: r.name, state: r.state, needs, attemptsUsed: Number(r.attempts_used), lostUsed: Number(r.lost_used), retry };
  });
  const changes = advance(nodes, { stage: trigger.name, outcome: p.outcome }, tx.now, p.jitter);
  // The rows as written so far: a second change of the same stage starts from the first.
  const byName = new Map<string, StageRow>(rows.map((r) => [r.name, { ...r }]));
  const readyPools = new Set<string>();
  for (const c of changes) {
    const row = byName.get(c.name)!;
    const isTrigger = row.id === p.stageId;
    const next: StageRow = { ...row, state: c.to };
    if (c.attemptsUsed !== undefined) next.attempts_used = c.attemptsUsed;
    if (c.lostUsed !== undefined) next.lost_used = c.lostUsed;
    if (c.to === 'ready') {
      next.ready_since = tx.now;
      next.not_before = c.notBefore ?? null;
      next.current_attempt_id = null;
      next.pending_reason = c.notBefore && c.notBefore > tx.now ? `${c.reason}: backing off until ${new Date(c.notBefore).toISOString()}` : c.reason;
      if (!c.notBefore || c.notBefore <= tx.now) readyPools.add(row.pool);
    }
    if (isStageTerminal(c.to)) {
      next.finished_at = tx.now;
      next.end_reason = c.reason;
      next.pending_reason = null;
    }
    // The commit of outputs: a pointer to the attempt, written only while it is still current.
    if (c.to === 'succeeded' && isTrigger && p.attemptId !== null) next.output_attempt_id = p.attemptId;
    const w: StageWrite = [
      next.state,
      tx.now,
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
    const changed = isTrigger && p.attemptId !== null ? await writeTrigger.affected(tx.db, ...w, p.attemptId) : await writeStage.affected(tx.db, ...w);
    if (changed !== 1) {
      throw new Error(`internal: stage ${row.name} of job ${p.jobId} changed under the advancer`);
    }
    // The manifest goes with the pointer, in the same transaction: a stage that commits no files writes nothing more.
    if (next.output_attempt_id !== row.output_attempt_id && p.attemptId !== null && p.outputs?.length) {
      await commitManifest(tx, { stageId: row.id, jobId: p.jobId, attemptId: p.attemptId, files: p.outputs });
    }
    byName.set(c.name, next);
    await tx.event({
      type: `stage:${c.to}`,
      jobId: p.jobId,
      stageName: c.name,
      attemptId: isTrigger ? p.attemptId : null,
      message: c.reason ? `stage ${c.name} ${c.to}: ${c.reason}` : `stage ${c.name} ${c.to}`,
      data: { from: c.from, to: c.to, notBefore: c.notBefore ?? null },
    });
  }
  for (const pool of readyPools) await tx.publish('pool:ready', { pool });
  // The stages as now written, in position order.
  return syncJobState(
    tx,
    p.jobId,
    rows.map((r) => byName.get(r.name)!),
    job,
  );
}
