import { sql } from 'kysely';
import { toStageNode } from './apply-outcome.js';
import { ConflictError, NotFoundError } from '../../domain/errors.js';
import { repairChanges } from '../../advancer/repair.js';
import { AttemptEndKind } from '../../domain/attempt-end.js';
import { activeAttemptStates } from '../../domain/attempt-state.js';
import type { JobState } from '../../domain/job-state.js';
import { isJobTerminal } from '../../domain/job-state.js';
import { isStageTerminal, type StageState } from '../../domain/stage-state.js';
import type { AttemptRecord, JobDetail, JobSummary, LogChunk } from '../records.js';
import { toAttempt, toJob, toStage } from './row-mappers.js';
import { syncJobState } from './sync-job-state.js';
import type { DeletedFiles } from '../store.js';
import type { Db, Trx, TxContext } from './tx-context.js';

// Submitting (one job or a batch) has its own file; re-exported here with the other job verbs.
export { jobSubmit, jobSubmitBatch } from './submit-verbs.js';

async function machineNames(db: Db | Trx, ids: string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .selectFrom('machines')
    .select(['id', 'name'])
    .where('id', 'in', [...new Set(ids)])
    .execute();
  return new Map(rows.map((r) => [r.id, r.name]));
}

export async function attemptsWithNames(db: Db | Trx, rows: Parameters<typeof toAttempt>[0][]): Promise<AttemptRecord[]> {
  const names = await machineNames(
    db,
    rows.map((r) => r.machine_id),
  );
  return rows.map((r) => toAttempt(r, names.get(r.machine_id) ?? r.machine_id));
}

/** `text` for a LIKE pattern, its wildcards taken literally (escaped with a backslash). */
function likeEscaped(text: string): string {
  return text.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/**
 * A job with its stages, their attempts and committed outputs, and the jobs that rerun it.
 * `fresh`: a job just made, which no job reruns yet (a submit's answer: one read fewer).
 */
export async function jobGet(db: Db | Trx, jobId: string, opts: { fresh?: boolean } = {}): Promise<JobDetail | null> {
  const job = await db.selectFrom('jobs').selectAll().where('id', '=', jobId).executeTakeFirst();
  if (!job) return null;
  const stages = await db.selectFrom('stages').selectAll().where('job_id', '=', jobId).orderBy('position').execute();
  // A gang's members share a number: by token then, which is by rank.
  const attemptRows = await db.selectFrom('attempts').selectAll().where('job_id', '=', jobId).orderBy('stage_id').orderBy('number').orderBy('token').execute();
  const attempts = await attemptsWithNames(db, attemptRows);
  // Manifests only where a stage committed: a job that has not got that far costs no read.
  const files = stages.some((s) => s.output_attempt_id !== null)
    ? await db.selectFrom('output_files').select(['stage_id', 'path', 'size', 'blob']).where('job_id', '=', jobId).orderBy('stage_id').orderBy('path').execute()
    : [];
  const reruns = opts.fresh ? [] : await db.selectFrom('jobs').select('id').where('rerun_of', '=', jobId).orderBy('created_at').orderBy('id').execute();
  return {
    ...toJob(job),
    reruns: reruns.map((r) => r.id),
    stages: stages.map((s) => ({
      ...toStage(s),
      attempts: attempts.filter((a) => a.stageId === s.id),
      outputs:
        s.state === 'succeeded' && s.outputs_released_at === null
          ? files.filter((f) => f.stage_id === s.id).map((f) => ({ path: f.path, size: Number(f.size), blob: f.blob }))
          : null,
    })),
  };
}

export async function jobList(db: Db, p: { state?: JobState; team?: string; name?: string; limit: number; before?: string }): Promise<JobSummary[]> {
  let q = db.selectFrom('jobs').selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(p.limit);
  if (p.state) q = q.where('state', '=', p.state);
  if (p.team) q = q.where('team', '=', p.team);
  // Part of the name, in any case: lower() on both sides, as SQLite's LIKE ignores case and PostgreSQL's does not.
  if (p.name) q = q.where(sql<string>`lower(name)`, 'like', sql<string>`${`%${likeEscaped(p.name.toLowerCase())}%`} escape '\\'`);
  if (p.before !== undefined) {
    // The next page: jobs listed after this one (older), by the same (created_at, id) order.
    const b = await db.selectFrom('jobs').select(['created_at']).where('id', '=', p.before).executeTakeFirst();
    if (!b) throw new NotFoundError('job', p.before, `job ${p.before} (the --before cursor) not found`);
    const at = Number(b.created_at);
    const id = p.before;
    q = q.where((eb) => eb.or([eb('created_at', '<', at), eb.and([eb('created_at', '=', at), eb('id', '<', id)])]));
  }
  const jobs = await q.execute();
  if (jobs.length === 0) return [];
  const counts = await db
    .selectFrom('stages')
    .select(['job_id', 'state', (eb) => eb.fn.countAll<number>().as('n')])
    .where(
      'job_id',
      'in',
      jobs.map((j) => j.id),
    )
    .groupBy(['job_id', 'state'])
    .execute();
  return jobs.map((j) => {
    const stageCounts: Partial<Record<StageState, number>> = {};
    for (const c of counts) if (c.job_id === j.id) stageCounts[c.state] = Number(c.n);
    return { ...toJob(j), stageCounts };
  });
}

/**
 * Cancel wins: in one transaction every unfinished stage becomes canceled and every active
 * attempt canceled, so no new attempt can be placed or started after this commits (the
 * scheduler's placement and the agent's start are guarded writes that now find nothing to
 * move). Agents hear of it through a `machine:wake` and kill the process groups.
 */
export async function jobCancel(tx: TxContext, p: { jobId: string; reason: string }): Promise<{ job: JobDetail; changed: boolean } | null> {
  const job = await tx.db.selectFrom('jobs').selectAll().where('id', '=', p.jobId).executeTakeFirst();
  if (!job) return null;
  if (isJobTerminal(job.state)) return { job: (await jobGet(tx.db, p.jobId))!, changed: false };
  await tx.db.updateTable('jobs').set({ cancel_requested_at: tx.now, updated_at: tx.now }).where('id', '=', p.jobId).execute();
  const active = await tx.db
    .selectFrom('attempts')
    .select(['id', 'machine_id', 'stage_name'])
    .where('job_id', '=', p.jobId)
    .where('state', 'in', activeAttemptStates)
    .execute();
  await tx.db
    .updateTable('attempts')
    // Canceled with its job: killed, by the control plane (the agent hears of it as a kill).
    .set({ state: 'canceled', reason: p.reason, end_kind: AttemptEndKind.killed, finished_at: tx.now, lease_expires_at: null })
    .where('job_id', '=', p.jobId)
    .where('state', 'in', activeAttemptStates)
    .execute();
  const open = await tx.db
    .selectFrom('stages')
    .select(['id', 'name', 'state'])
    .where('job_id', '=', p.jobId)
    .where('state', 'in', ['pending', 'ready', 'scheduled', 'running'])
    .execute();
  for (const s of open) {
    await tx.db
      .updateTable('stages')
      .set({ state: 'canceled', end_reason: p.reason, pending_reason: null, finished_at: tx.now, updated_at: tx.now })
      .where('id', '=', s.id)
      .where('state', '=', s.state)
      .execute();
  }
  await tx.event({
    type: 'job:cancel-requested',
    jobId: p.jobId,
    message: `cancel accepted: ${p.reason}; ${open.length} stage(s) canceled, ${active.length} running attempt(s) to kill`,
    data: { stages: open.map((s) => s.name), attempts: active.map((a) => a.id) },
  });
  for (const a of active) {
    await tx.event({
      type: 'attempt:canceled',
      jobId: p.jobId,
      stageName: a.stage_name,
      attemptId: a.id,
      machineId: a.machine_id,
      message: `attempt canceled: ${p.reason}`,
      data: { end: AttemptEndKind.killed },
    });
  }
  // The agents are told to kill; the resources are released when they stop listing the attempts.
  for (const m of new Set(active.map((a) => a.machine_id))) {
    await tx.publish('machine:wake', { machineId: m });
  }
  await syncJobState(tx, p.jobId);
  return { job: (await jobGet(tx.db, p.jobId))!, changed: true };
}

export async function stageLogs(
  db: Db,
  p: { jobId: string; stage: string; attempt?: number; rank?: number | 'all'; afterId?: number; limit: number },
): Promise<LogChunk[] | null> {
  const stage = await db.selectFrom('stages').select(['id']).where('job_id', '=', p.jobId).where('name', '=', p.stage).executeTakeFirst();
  if (!stage) return null;
  // A gang's members share the attempt's number, each with its own log (docs/gangs.md): rank 0's
  // unless another rank (or all) is asked for; an ordinary attempt is rank 0's alone.
  const rank = p.rank ?? 0;
  let aq = db.selectFrom('attempts').select(['id', 'number', 'gang_rank']).where('stage_id', '=', stage.id);
  if (rank === 0) aq = aq.where((eb) => eb.or([eb('gang_rank', 'is', null), eb('gang_rank', '=', 0)]));
  else if (rank !== 'all') aq = aq.where('gang_rank', '=', rank);
  if (p.attempt !== undefined) aq = aq.where('number', '=', p.attempt);
  const attempts = await aq.orderBy('number').orderBy('token').execute();
  if (attempts.length === 0) return [];
  // Default: the latest attempt's log (every member's, for all ranks), which is what a person looking at a stage wants.
  const latest = Number(attempts.at(-1)!.number);
  const chosen = p.attempt !== undefined ? attempts : attempts.filter((a) => Number(a.number) === latest);
  const byId = new Map(chosen.map((a) => [a.id, { number: Number(a.number), rank: a.gang_rank === null ? undefined : Number(a.gang_rank) }]));
  let q = db
    .selectFrom('log_chunks')
    .selectAll()
    .where(
      'attempt_id',
      'in',
      chosen.map((a) => a.id),
    )
    .orderBy('id');
  if (p.afterId !== undefined) q = q.where('id', '>', p.afterId);
  const rows = await q.limit(p.limit).execute();
  return rows.map((r) => {
    const a = byId.get(r.attempt_id)!;
    return {
      id: Number(r.id),
      attemptNumber: a.number,
      ...(a.rank !== undefined ? { rank: a.rank } : {}),
      stream: r.stream,
      at: Number(r.at),
      data: r.data,
    };
  });
}

/** A stage in these states is moving (queued, placed, running): its job is not stuck. */
const MOVING_STAGE_STATES = ['ready', 'scheduled', 'running'] as const;

/** Jobs looked at per repair pass: the pass walks all of them in id order, this many at a time. */
export const REPAIR_SCAN = 2000;

export async function jobsRepair(
  tx: TxContext,
  p: { staleAfterMs: number; limit: number; after?: string | null; scan?: number },
): Promise<{ moved: string[]; next: string | null }> {
  // A window of jobs in id order after the cursor, not every unfinished job: with a hundred
  // thousand jobs waiting in the queues, a pass must not look at all of them. The caller keeps the
  // cursor; a sweep of N jobs takes N / scan passes, then starts over.
  //
  // Only `id` and `state` are read for the window: a job row carries its whole spec, and on SQLite
  // the columns after it (`updated_at`) are reached through the spec's overflow pages, five or six
  // pages a job of 100 stages: 42 ms a pass over 1,000 such jobs, a stall of the event loop every
  // second (measured with 100,000 stages waiting). Then only the unfinished jobs with no stage
  // queued, placed or running are read further: a job with one is not stuck, whatever its age
  // (no rescans, no writes for jobs simply waiting), and `not exists` stops at its first such
  // stage, where reading all its stages to find out took another 39 ms per 500 jobs of 100 stages.
  const scan = p.scan ?? REPAIR_SCAN;
  let wq = tx.db.selectFrom('jobs').select(['id', 'state']).orderBy('id').limit(scan);
  if (p.after) wq = wq.where('id', '>', p.after);
  const window = await wq.execute();
  const next = window.length < scan ? null : window.at(-1)!.id;
  const unfinished = window.filter((j) => !isJobTerminal(j.state)).map((j) => j.id);
  const unchangedSince = new Map<string, number>();
  for (let i = 0; i < unfinished.length; i += 500) {
    const rows = await tx.db
      .selectFrom('jobs')
      .select(['id', 'updated_at'])
      .where('id', 'in', unfinished.slice(i, i + 500))
      .where((eb) =>
        eb.not(
          eb.exists(eb.selectFrom('stages').select('stages.id').whereRef('stages.job_id', '=', 'jobs.id').where('stages.state', 'in', MOVING_STAGE_STATES)),
        ),
      )
      .execute();
    for (const r of rows) unchangedSince.set(r.id, Number(r.updated_at));
  }
  const stale = unfinished
    .filter((id) => unchangedSince.has(id) && unchangedSince.get(id)! < tx.now - p.staleAfterMs)
    .slice(0, p.limit)
    .map((id) => ({ id }));
  const moved: string[] = [];
  for (const { id } of stale) {
    const rows = await tx.db.selectFrom('stages').selectAll().where('job_id', '=', id).orderBy('position').execute();
    const changes = repairChanges(rows.map(toStageNode));
    for (const c of changes) {
      const row = rows.find((r) => r.name === c.name)!;
      const res = await tx.db
        .updateTable('stages')
        .set({
          state: c.to,
          updated_at: tx.now,
          pending_reason: null,
          ...(c.to === 'ready' ? { ready_since: tx.now, not_before: null } : {}),
          ...(isStageTerminal(c.to) ? { finished_at: tx.now, end_reason: c.reason } : {}),
        })
        .where('id', '=', row.id)
        .where('state', '=', c.from)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) continue;
      await tx.event({
        type: `stage:${c.to}`,
        jobId: id,
        stageName: c.name,
        message: `stage ${c.name} ${c.to} (reconciler repair)${c.reason ? `: ${c.reason}` : ''}`,
      });
      if (c.to === 'ready') await tx.publish('pool:ready', { pool: row.pool });
    }
    if (changes.length) moved.push(id);
    // Touched, so the next pass looks at other jobs first.
    await tx.db.updateTable('jobs').set({ updated_at: tx.now }).where('id', '=', id).execute();
    await syncJobState(tx, id);
  }
  return { moved, next };
}

export async function jobsExpire(tx: TxContext, p: { finishedBefore: number; limit: number }): Promise<{ jobs: string[] } & DeletedFiles> {
  const jobs = (
    await tx.db
      .selectFrom('jobs')
      .select('id')
      .where('state', 'in', ['succeeded', 'failed', 'canceled'])
      .where('finished_at', '<', p.finishedBefore)
      .orderBy('finished_at')
      .limit(p.limit)
      .execute()
  ).map((j) => j.id);
  if (jobs.length === 0) return { jobs, attempts: [], legacyDirs: [] };
  // An ended job's attempts are all ended; one still holding resources (its agent has not yet
  // stopped listing it) keeps its job until it is released.
  const held = await tx.db.selectFrom('attempts').select('job_id').where('job_id', 'in', jobs).where('released_at', 'is', null).execute();
  const keep = new Set(held.map((h) => h.job_id));
  const gone = jobs.filter((j) => !keep.has(j));
  if (gone.length === 0) return { jobs: [], attempts: [], legacyDirs: [] };
  return { jobs: gone, ...(await deleteJobs(tx, gone)) };
}

/**
 * Deletes one ended job at a person's request (`gantry delete`), as retention would: its stages,
 * attempts, events, logs and its references to outputs. Null for no such job; ConflictError for a
 * job not ended, or whose last process is still being stopped.
 */
export async function jobDelete(tx: TxContext, jobId: string): Promise<DeletedFiles | null> {
  const j = await tx.db.selectFrom('jobs').select(['state']).where('id', '=', jobId).executeTakeFirst();
  if (!j) return null;
  if (!isJobTerminal(j.state))
    throw new ConflictError(`job ${jobId} is ${j.state}: only an ended job can be deleted (cancel it first: gantry cancel ${jobId})`);
  const held = await tx.db.selectFrom('attempts').select('id').where('job_id', '=', jobId).where('released_at', 'is', null).executeTakeFirst();
  if (held) throw new ConflictError(`job ${jobId} ended, but a process of it is still being stopped on its machine; try again in a few seconds`);
  return deleteJobs(tx, [jobId]);
}

/**
 * Every row of these jobs, logs first. Their manifests go too: a blob they named is stamped as
 * unreferenced from now (collection goes oldest first), and is collected once no other job's
 * manifest names it; what a rerun reused stays, named by the rerun's own manifest.
 */
async function deleteJobs(tx: TxContext, gone: string[]): Promise<DeletedFiles> {
  const goneAttempts = (await tx.db.selectFrom('attempts').select('id').where('job_id', 'in', gone).execute()).map((a) => a.id);
  const stillNamed = new Set<string>();
  for (let i = 0; i < goneAttempts.length; i += 500) {
    const part = goneAttempts.slice(i, i + 500);
    await tx.db.deleteFrom('log_chunks').where('attempt_id', 'in', part).execute();
    await tx.db.deleteFrom('output_uploads').where('attempt_id', 'in', part).execute();
  }
  await tx.db
    .updateTable('artifact_blobs')
    .set({ touched_at: tx.now })
    .where('key', 'in', (eb) => eb.selectFrom('output_files').select('blob').where('job_id', 'in', gone))
    .execute();
  await tx.db.deleteFrom('output_files').where('job_id', 'in', gone).execute();
  // A file another job still names (a rerun reused it) keeps its attempt's old directory.
  for (let i = 0; i < goneAttempts.length; i += 500) {
    const rows = await tx.db
      .selectFrom('output_files')
      .select('attempt_id')
      .distinct()
      .where('attempt_id', 'in', goneAttempts.slice(i, i + 500))
      .where('blob', 'like', 'legacy:%')
      .execute();
    for (const r of rows) stillNamed.add(r.attempt_id);
  }
  await tx.db.deleteFrom('events').where('job_id', 'in', gone).execute();
  await tx.db.deleteFrom('attempts').where('job_id', 'in', gone).execute();
  await tx.db.deleteFrom('stages').where('job_id', 'in', gone).execute();
  await tx.db.deleteFrom('jobs').where('id', 'in', gone).execute();
  return { attempts: goneAttempts, legacyDirs: goneAttempts.filter((a) => !stillNamed.has(a)) };
}
