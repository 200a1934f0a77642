import { sql } from 'kysely';
import { isJobTerminal, type JobState } from '../../domain/job-state.js';
import type { OutcomePlan, StageRow } from './apply-outcome.js';
import { prepared, preparedBySize } from './prepared-query.js';
import { jobMove, recordJobStateChange } from './sync-job-state.js';
import type { TxContext } from './tx-context.js';
import { keysOf, v, valuesTable, writeRows } from './values-table.js';

/** Rows per set-based write: each is a few bound values (at most 13, under the 1,024 a prepared text may take). */
export const ROWS_PER_STATEMENT = 64;

const STAGE_TYPES = ['text', 'text', 'text', 'text', 'integer', 'integer', 'bigint', 'bigint', 'text', 'text', 'bigint', 'text', 'text'] as const;
/** The advancer's writes (writeStage, writeTrigger in apply-outcome.ts) for many stages: each fenced on its state, a trigger also on its attempt. */
const writeStages = preparedBySize(ROWS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [at, ...values]) =>
    db
      .updateTable('stages')
      .from(valuesTable(values, STAGE_TYPES, n))
      .set({
        state: v(4),
        updated_at: at as number,
        attempts_used: v(5),
        lost_used: v(6),
        ready_since: v(7),
        not_before: v(8),
        current_attempt_id: v(9),
        pending_reason: v(10),
        finished_at: v(11),
        end_reason: v(12),
        output_attempt_id: v(13),
      })
      .where(sql<boolean>`"stages"."id" = v.column1 and "stages"."state" = v.column2 and (v.column3 is null or "stages"."current_attempt_id" = v.column3)`)
      .where('stages.id', 'in', keysOf(values, STAGE_TYPES, n))
      .returning('id'),
  ),
);

const JOB_TYPES = ['text', 'text', 'text', 'integer', 'text'] as const;
/** syncJobState's moves for many jobs, each guarded on the state read: an ending also sets its end time and failure. */
const moveJobs = preparedBySize(ROWS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [at, ...values]) =>
    db
      .updateTable('jobs')
      .from(valuesTable(values, JOB_TYPES, n))
      .set({
        state: v(3),
        updated_at: at as number,
        finished_at: sql`case when v.column4 = 1 then ${at} else "jobs"."finished_at" end`,
        failure_reason: sql`case when v.column4 = 1 then v.column5 else "jobs"."failure_reason" end`,
      })
      .where(sql<boolean>`"jobs"."id" = v.column1 and "jobs"."state" = v.column2`)
      .where('jobs.id', 'in', keysOf(values, JOB_TYPES, n))
      .returning('id'),
  ),
);

/**
 * A stage the advancer planned from a read was no longer as read when written. Under SERIALIZABLE
 * that cannot happen (a bug); a READ COMMITTED loss batch (loss-read-committed.ts) takes it as a
 * read its row locks did not stand for, and runs again SERIALIZABLE.
 */
export class StageMovedUnderAdvancer extends Error {
  constructor(stage: string, jobId: string) {
    super(`internal: stage ${stage} of job ${jobId} changed under the advancer`);
    this.name = 'StageMovedUnderAdvancer';
  }
}

/** One outcome's advancer plan (planOutcome) over its job's stages as read in this transaction. */
export interface JobPlan {
  jobId: string;
  plan: OutcomePlan;
}

/** A planned outcome once written: the move its job's state makes, and whether the job's guarded write took it. */
export interface WrittenPlan extends JobPlan {
  move: { from: JobState; to: JobState; failureReason: string | null };
  jobMoved: boolean;
}

/**
 * applyOutcome's writes for many outcomes at once, set-based: one guarded statement for every
 * stage their advancers move (ROWS_PER_STATEMENT a statement), one for their jobs, whatever their
 * number. The caller's outcomes are each of a different job, whose stages and row it read in this
 * transaction and nothing has written since. A stage changed twice by one advancer is written once,
 * in its last form, guarded on its first state. A stage that moved under its advancer is a bug, as in
 * applyOutcome: it throws, and the transaction writes nothing. Events are left to planEvents.
 */
export async function writePlans(tx: TxContext, plans: readonly JobPlan[]): Promise<WrittenPlan[]> {
  const stageWrites = new Map<string, { first: StageRow['state']; last: unknown[]; fencedOn: string | null; jobId: string; name: string }>();
  const jobWrites: unknown[][] = [];
  const moves: WrittenPlan['move'][] = [];
  for (const { jobId, plan } of plans) {
    for (const ch of plan.changes) {
      const [state, , attemptsUsed, lostUsed, readySince, notBefore, current, pending, finishedAt, endReason, output, id, from] = ch.write;
      const row = [state, attemptsUsed, lostUsed, readySince, notBefore, current, pending, finishedAt, endReason, output];
      const seen = stageWrites.get(id);
      if (seen) {
        seen.last = row;
        seen.fencedOn ??= ch.fencedOn;
      } else stageWrites.set(id, { first: from, last: row, fencedOn: ch.fencedOn, jobId, name: ch.before.name });
    }
    if (!plan.job) throw new Error(`internal: job ${jobId} is gone`);
    const move = jobMove(plan.job, plan.stagesAfter, jobId);
    moves.push(move);
    if (move.from !== move.to) jobWrites.push([jobId, move.from, move.to, isJobTerminal(move.to) ? 1 : 0, move.failureReason]);
  }
  const stagesWritten = await writeRows(
    tx,
    writeStages,
    [...stageWrites].map(([id, w]) => [id, w.first, w.fencedOn, ...w.last]),
    ROWS_PER_STATEMENT,
  );
  for (const [id, w] of stageWrites) {
    if (!stagesWritten.has(id)) throw new StageMovedUnderAdvancer(w.name, w.jobId);
  }
  const jobsMoved = await writeRows(tx, moveJobs, jobWrites, ROWS_PER_STATEMENT);
  return plans.map((p, i) => ({ ...p, move: moves[i]!, jobMoved: jobsMoved.has(p.jobId) }));
}

/** What applyOutcome says after its writes, for one written plan: its stages' events, the pools it readied, its job's move. */
export async function planEvents(tx: TxContext, w: WrittenPlan): Promise<void> {
  for (const ch of w.plan.changes) await tx.event(ch.event);
  for (const pool of w.plan.readyPools) await tx.publish('pool:ready', { pool });
  // Guarded on the state read, as moveJobTo: a job that was no longer there changed nothing and says nothing.
  if (w.move.from !== w.move.to && w.jobMoved) await recordJobStateChange(tx, w.jobId, w.move.from, w.move.to, w.move.failureReason);
}
