import { advance, type AttemptOutcome, type StageNode } from '../../advancer/advance.js';
import type { JobState } from '../../domain/job-state.js';
import { isStageTerminal, type StageState } from '../../domain/stage-state.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import type { StagesTable } from '../schema.js';
import { syncJobState } from './sync-job-state.js';
import type { TxContext } from './tx-context.js';

/** A stored stage as the advancer sees it. */
export function toStageNode(r: StagesTable): StageNode {
  const def = JSON.parse(r.definition) as StageDefinition;
  return {
    name: r.name,
    state: r.state as StageState,
    needs: def.needs,
    attemptsUsed: Number(r.attempts_used),
    lostUsed: Number(r.lost_used),
    retry: def.retry,
  };
}

/**
 * After an attempt has been moved to its final state: run the advancer over the attempt's job
 * and write what it decides, in the same transaction. Shared by every way an attempt can end
 * (agent report, lease expiry, machine loss), so the DAG moves the same way whatever ended it.
 */
export async function applyOutcome(
  tx: TxContext,
  p: { jobId: string; stageId: string; attemptId: string; outcome: AttemptOutcome; jitter: number },
): Promise<JobState> {
  const rows = await tx.db.selectFrom('stages').selectAll().where('job_id', '=', p.jobId).orderBy('position').execute();
  const trigger = rows.find((r) => r.id === p.stageId);
  // Only the stage's current attempt moves the DAG; an outcome from any other attempt was
  // already fenced off by the caller, and this guard keeps that true for every caller.
  if (!trigger || trigger.current_attempt_id !== p.attemptId) return syncJobState(tx, p.jobId);
  const nodes = rows.map(toStageNode);
  const changes = advance(nodes, { stage: trigger.name, outcome: p.outcome }, tx.now, p.jitter);
  const byName = new Map<string, StagesTable>(rows.map((r) => [r.name, r]));
  const readyPools = new Set<string>();
  for (const c of changes) {
    const row = byName.get(c.name)!;
    const isTrigger = row.id === p.stageId;
    const set: Partial<StagesTable> = { state: c.to, updated_at: tx.now };
    if (c.attemptsUsed !== undefined) set.attempts_used = c.attemptsUsed;
    if (c.lostUsed !== undefined) set.lost_used = c.lostUsed;
    if (c.to === 'ready') {
      set.ready_since = tx.now;
      set.not_before = c.notBefore ?? null;
      set.current_attempt_id = null;
      set.pending_reason =
        c.notBefore && c.notBefore > tx.now
          ? `${c.reason}: backing off until ${new Date(c.notBefore).toISOString()}`
          : c.reason;
      if (!c.notBefore || c.notBefore <= tx.now) readyPools.add(row.pool);
    }
    if (isStageTerminal(c.to)) {
      set.finished_at = tx.now;
      set.end_reason = c.reason;
      set.pending_reason = null;
    }
    // The commit of outputs: a pointer to the attempt, written only while it is still current.
    if (c.to === 'succeeded' && isTrigger) set.output_attempt_id = p.attemptId;
    let q = tx.db.updateTable('stages').set(set).where('id', '=', row.id).where('state', '=', c.from);
    if (isTrigger) q = q.where('current_attempt_id', '=', p.attemptId);
    const res = await q.executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) {
      throw new Error(`internal: stage ${row.name} of job ${p.jobId} changed under the advancer`);
    }
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
  // The stages as now written: each change applied to the rows read above.
  const after = rows.map((r) => {
    const last = changes.filter((c) => c.name === r.name).at(-1);
    return last ? { name: r.name, state: last.to, end_reason: isStageTerminal(last.to) ? last.reason : r.end_reason } : r;
  });
  return syncJobState(tx, p.jobId, after);
}
