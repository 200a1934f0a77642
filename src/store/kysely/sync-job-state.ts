import { deriveJobState } from '../../advancer/derive-job-state.js';
import { isJobTerminal, type JobState, jobTransitions } from '../../domain/job-state.js';
import type { StageState } from '../../domain/stage-state.js';
import { canTransition } from '../../domain/transition-table.js';
import type { TxContext } from './tx-context.js';

/**
 * Rewrites a job's stored state from its stages, inside the transaction that changed them.
 * A derived state the job's transition table does not allow is a bug, and rolls the whole
 * transaction back rather than store an impossible history.
 */
export async function syncJobState(
  tx: TxContext,
  jobId: string,
  /** The job's stages as the caller just wrote them, in position order, to save reading them again. */
  known?: readonly { name: string; state: string; end_reason: string | null }[],
): Promise<JobState> {
  const job = await tx.db
    .selectFrom('jobs')
    .select(['state', 'cancel_requested_at'])
    .where('id', '=', jobId)
    .executeTakeFirstOrThrow();
  const stages =
    known ??
    (await tx.db.selectFrom('stages').select(['name', 'state', 'end_reason']).where('job_id', '=', jobId).orderBy('position').execute());
  const from = job.state as JobState;
  const to = deriveJobState(
    stages.map((s) => s.state as StageState),
    job.cancel_requested_at !== null,
  );
  if (from === to) return to;
  if (!canTransition(jobTransitions, from, to)) {
    throw new Error(`internal: job ${jobId} cannot move from ${from} to ${to}`);
  }
  const failed = stages.find((s) => s.state === 'failed');
  const failureReason = to === 'failed' && failed ? `stage ${failed.name} failed: ${failed.end_reason ?? 'unknown'}` : null;
  await tx.db
    .updateTable('jobs')
    .set({
      state: to,
      updated_at: tx.now,
      ...(isJobTerminal(to) ? { finished_at: tx.now, failure_reason: failureReason } : {}),
    })
    .where('id', '=', jobId)
    .where('state', '=', from)
    .execute();
  await recordJobStateChange(tx, jobId, from, to, failureReason);
  return to;
}

/**
 * syncJobState after a stage of the job became `scheduled` (placed) or `running` (started): the
 * derivation can only land on `scheduled` or `running`, so a job already there (or past `scheduled`,
 * for a placement) needs no read of its stages. The common case on the hot path: one small read.
 */
export async function syncJobStateOnActivation(tx: TxContext, jobId: string, became: 'scheduled' | 'running'): Promise<JobState> {
  const job = await tx.db.selectFrom('jobs').select('state').where('id', '=', jobId).executeTakeFirstOrThrow();
  const state = job.state as JobState;
  // A running stage makes the job running; a scheduled one leaves a running job running.
  if (state === 'running' || (became === 'scheduled' && state === 'scheduled')) return state;
  return syncJobState(tx, jobId);
}

/** The event and the message every change of a job's state writes (its row already updated). */
export async function recordJobStateChange(tx: TxContext, jobId: string, from: JobState, to: JobState, failureReason: string | null = null): Promise<void> {
  await tx.event({
    type: `job:${to}`,
    jobId,
    message: failureReason ? `job ${to}: ${failureReason}` : `job ${to}`,
    data: { from, to },
  });
  await tx.publish('job:changed', { jobId, state: to });
}
