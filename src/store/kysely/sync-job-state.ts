import { deriveJobState } from '../../advancer/derive-job-state.js';
import { isJobTerminal, type JobState, jobTransitions } from '../../domain/job-state.js';
import type { StageState } from '../../domain/stage-state.js';
import { canTransition } from '../../domain/transition-table.js';
import { prepared, preparedBySize } from './prepared-query.js';
import type { TxContext } from './tx-context.js';
import { StartsNeedSerializable } from './starts-read-committed.js';

const jobState = prepared<[jobId: string]>()((db, [id]) => db.selectFrom('jobs').select(['state', 'cancel_requested_at']).where('id', '=', id));
const stageStates = prepared<[jobId: string]>()((db, [id]) =>
  db.selectFrom('stages').select(['name', 'state', 'end_reason', 'finished_at']).where('job_id', '=', id).orderBy('position'),
);
const moveJob = prepared<[to: JobState, at: number, id: string, from: JobState]>()((db, [to, at, id, from]) =>
  db.updateTable('jobs').set({ state: to, updated_at: at }).where('id', '=', id).where('state', '=', from),
);
const endJob = prepared<[to: JobState, at: number, failureReason: string | null, id: string, from: JobState]>()((db, [to, at, failureReason, id, from]) =>
  db.updateTable('jobs').set({ state: to, updated_at: at, finished_at: at, failure_reason: failureReason }).where('id', '=', id).where('state', '=', from),
);

/**
 * Rewrites a job's stored state from its stages, inside the transaction that changed them.
 * A derived state the job's transition table does not allow is a bug, and rolls the whole
 * transaction back rather than store an impossible history.
 */
export async function syncJobState(
  tx: TxContext,
  jobId: string,
  /** The job's stages as the caller just wrote them, in position order, to save reading them again. */
  known?: readonly { name: string; state: string; end_reason: string | null; finished_at: number | null }[],
  /** The job's row as the caller read it in this transaction, when nothing has written it since. */
  knownJob?: { state: string; cancel_requested_at: number | null },
): Promise<JobState> {
  const job = knownJob ?? (await jobState.first(tx.db, jobId));
  if (!job) throw new Error(`internal: job ${jobId} is gone`);
  const move = jobMove(job, known ?? (await stageStates.rows(tx.db, jobId)), jobId);
  if (move.from !== move.to) await moveJobTo(tx, jobId, move.from, move.to, move.failureReason);
  return move.to;
}

/**
 * The state a job's stages derive, from the state its row holds: what syncJobState writes, decided
 * in memory (a report's outcomes write their jobs' moves set-based, complete-many.ts). A move the
 * job's transition table does not allow is a bug, refused here before anything is written.
 */
export function jobMove(
  job: { state: string; cancel_requested_at: number | null },
  stages: readonly { name: string; state: string; end_reason: string | null; finished_at: number | null }[],
  jobId = '',
): { from: JobState; to: JobState; failureReason: string | null } {
  const from = job.state as JobState;
  const to = deriveJobState(
    stages.map((s) => s.state as StageState),
    job.cancel_requested_at !== null,
  );
  if (from === to) return { from, to, failureReason: null };
  if (!canTransition(jobTransitions, from, to)) throw new Error(`internal: job ${jobId} cannot move from ${from} to ${to}`);
  const failed = firstFailed(stages);
  return { from, to, failureReason: to === 'failed' && failed ? `stage ${failed.name} failed: ${failed.end_reason ?? 'unknown'}` : null };
}

/**
 * syncJobState after a stage of the job became `scheduled` (placed) or `running` (started), with
 * no read of its stages: the job's stored state is the derivation of its stages as they were,
 * and one more stage placed or started can only lift it to `scheduled` (from `submitted` or
 * `queued`) or to `running` (from anything short of it). A job already past that stays.
 */
export async function syncJobStateOnActivation(
  tx: TxContext,
  jobId: string,
  became: 'scheduled' | 'running',
  /** The job's state as the caller read it in this transaction, when nothing has written its row since. */
  known?: string,
): Promise<JobState> {
  const from = (known ?? (await jobState.first(tx.db, jobId))?.state) as JobState | undefined;
  if (!from) throw new Error(`internal: job ${jobId} is gone`);
  if (isJobTerminal(from)) return syncJobState(tx, jobId);
  const to: JobState = became === 'running' || from === 'running' ? 'running' : 'scheduled';
  if (from === to) return to;
  await moveJobTo(tx, jobId, from, to, null);
  return to;
}

/** Rows per batched job activation (each id a bound parameter). */
const JOBS_PER_STATEMENT = 64;
const moveJobs = preparedBySize(JOBS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [to, at, from, ...ids]) =>
    db
      .updateTable('jobs')
      .set({ state: to as JobState, updated_at: at as number })
      .where('id', 'in', ids.slice(0, n) as string[])
      .where('state', '=', from as JobState)
      .returning('id'),
  ),
);

/**
 * syncJobStateOnActivation for many jobs, each named once, with their states as read in this
 * transaction: one guarded update per state they move from (not one per job), then each moved
 * job's event. A job whose state is not known, or has ended, goes alone as before.
 */
export async function syncJobsOnActivation(
  tx: TxContext,
  jobs: readonly { id: string; state: string | undefined }[],
  became: 'scheduled' | 'running',
  /**
   * READ COMMITTED (a report of starts alone, starts-read-committed.ts): every job is written,
   * guarded on the state read, a job that stays `running` too (its row rewritten as it is), and a
   * job not found in that state throws StartsNeedSerializable. Without the write, a SERIALIZABLE
   * transaction that read the stage before this start committed could derive the job's state from
   * it and write it, and SSI, which sees only serializable transactions, would refuse neither
   * (found in review: a job `scheduled` with a stage running).
   */
  readCommitted = false,
): Promise<void> {
  const from = new Map<JobState, string[]>();
  const staying: string[] = [];
  for (const j of jobs) {
    const state = j.state as JobState | undefined;
    if (state === undefined || isJobTerminal(state)) {
      if (readCommitted) throw new StartsNeedSerializable(`job ${j.id} ${state === undefined ? 'not read' : 'ended'}`);
      await syncJobStateOnActivation(tx, j.id, became, j.state);
      continue;
    }
    // As syncJobStateOnActivation: `running` stays; anything short of the activation is lifted to it.
    if (state === 'running' || state === became) {
      if (readCommitted) staying.push(j.id);
      continue;
    }
    if (!canTransition(jobTransitions, state, became)) throw new Error(`internal: job ${j.id} cannot move from ${state} to ${became}`);
    const ids = from.get(state);
    if (ids) ids.push(j.id);
    else from.set(state, [j.id]);
  }
  for (let i = 0; i < staying.length; i += JOBS_PER_STATEMENT) {
    const part = staying.slice(i, i + JOBS_PER_STATEMENT);
    const states = jobs.filter((j) => part.includes(j.id));
    for (const state of new Set(states.map((j) => j.state as JobState))) {
      const ids = states.filter((j) => j.state === state).map((j) => j.id);
      const kept = await keepJobs(ids.length).rows(tx.db, state, ...ids);
      if (kept.length < ids.length) throw new StartsNeedSerializable('a job changed since it was read');
    }
  }
  for (const [state, ids] of from) {
    for (let i = 0; i < ids.length; i += JOBS_PER_STATEMENT) {
      const part = ids.slice(i, i + JOBS_PER_STATEMENT);
      const moved = new Set((await moveJobs(part.length).rows(tx.db, became, tx.now, state, ...part)).map((r) => r.id));
      if (readCommitted && moved.size < part.length) throw new StartsNeedSerializable('a job changed since it was read');
      // Guarded on the state read: a job that was no longer there changed nothing and says nothing.
      for (const id of part) if (moved.has(id)) await recordJobStateChange(tx, id, state, became);
    }
  }
}

/** Jobs rewritten as they are, guarded on their state (syncJobsOnActivation READ COMMITTED): a write a serializable writer of the row is refused after. */
const keepJobs = preparedBySize(JOBS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [state, ...ids]) =>
    db
      .updateTable('jobs')
      .set((eb) => ({ updated_at: eb.ref('updated_at') }))
      .where('id', 'in', ids.slice(0, n) as string[])
      .where('state', '=', state as JobState)
      .returning('id'),
  ),
);

/**
 * The stage whose failure failed the job: the first to fail (earliest `finished_at`; on a tie,
 * the first by position). Stages failing later, while the job was already failing ("not retried
 * because the job is failing"), only followed it.
 */
function firstFailed<S extends { state: string; finished_at: number | null }>(stages: readonly S[]): S | undefined {
  let first: S | undefined;
  for (const s of stages) {
    if (s.state !== 'failed') continue;
    if (first === undefined || Number(s.finished_at ?? Infinity) < Number(first.finished_at ?? Infinity)) first = s;
  }
  return first;
}

async function moveJobTo(tx: TxContext, jobId: string, from: JobState, to: JobState, failureReason: string | null): Promise<void> {
  if (!canTransition(jobTransitions, from, to)) {
    throw new Error(`internal: job ${jobId} cannot move from ${from} to ${to}`);
  }
  const changed = isJobTerminal(to)
    ? await endJob.affected(tx.db, to, tx.now, failureReason, jobId, from)
    : await moveJob.affected(tx.db, to, tx.now, jobId, from);
  // Guarded on `from`: if the job was no longer there, this changed nothing and says nothing.
  if (changed !== 1) return;
  await recordJobStateChange(tx, jobId, from, to, failureReason);
}

/** The event every change of a job's state writes (its row already updated). */
export async function recordJobStateChange(tx: TxContext, jobId: string, from: JobState, to: JobState, failureReason: string | null = null): Promise<void> {
  await tx.event({
    type: `job:${to}`,
    jobId,
    message: failureReason ? `job ${to}: ${failureReason}` : `job ${to}`,
    data: { from, to },
  });
}
