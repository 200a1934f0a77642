import { sql } from 'kysely';
import { activeAttemptStates } from '../../domain/attempt-state.js';
import { isJobTerminal, type JobState } from '../../domain/job-state.js';
import type { AttemptCompletion, ReportItemOutcome } from '../store.js';
import { type JobStageRows, type OutcomePlan, planOutcome, type StageRow } from './apply-outcome.js';
import { outcomeEvent, outcomeOf, type ReportedAttempt } from './attempt-verbs.js';
import { recordJobStateChange, jobMove } from './sync-job-state.js';
import { prepared, preparedBySize } from './prepared-query.js';
import type { TxContext } from './tx-context.js';
import { v, valuesTable, writeRows } from './values-table.js';

/** Rows per set-based write: each is a few bound values (at most 13, under the 1,024 a prepared text may take). */
const ROWS_PER_STATEMENT = 64;

const ATTEMPT_TYPES = ['text', 'integer', 'text', 'integer', 'text', 'text', 'text', 'text', 'bigint', 'double precision', 'bigint'] as const;
/** completeAttempt (attempt-verbs.ts) for many attempts: each fenced on its token and on being still active. */
const endAttempts = preparedBySize(ROWS_PER_STATEMENT, (n) =>
  prepared<unknown[]>()((db, [at, ...values]) =>
    db
      .updateTable('attempts')
      .from(valuesTable(values, ATTEMPT_TYPES, n))
      .set({
        state: v(3),
        exit_code: v(4),
        signal: v(5),
        reason: v(6),
        end_kind: v(7),
        outputs: v(8),
        memory_peak_bytes: v(9),
        cpu_seconds: v(10),
        finished_at: at as number,
        lease_expires_at: null,
        started_at: v(11),
        // The agent reports an outcome only after the process is gone.
        released_at: at as number,
      })
      .where(sql<boolean>`"attempts"."id" = v.column1 and "attempts"."token" = v.column2`)
      .where('attempts.state', 'in', activeAttemptStates)
      .returning('id'),
  ),
);

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
      .returning('id'),
  ),
);

/** An outcome completeMany can take: its attempt loaded, fenced and active, of no gang, its job's stages read in this transaction. */
export interface PlainOutcome {
  a: ReportedAttempt;
  c: AttemptCompletion;
  jitter: number;
  stages: JobStageRows;
  /** The bytes its log lost (logCutWithoutWrites): recording it writes nothing for its log. */
  logCut: number | null;
}

/**
 * completeLoaded for many outcomes at once, written set-based (docs/throughput.md, "A report's
 * outcomes set-based"): one guarded statement for their attempts, one for every stage their
 * advancers move, one for their jobs, whatever their number. Only for the plain case, which the
 * caller checks: each attempt of no gang, active with the report's token, committing no files,
 * with nothing to write for its log, and alone in the report with its attempt and its job (so
 * that each job's stages, read once, are still as read).
 *
 * Each outcome is still fenced as alone: an attempt the guarded update did not find active with
 * its token is answered stale, and nothing of it is written. A stage that moved under its
 * advancer, or a job move the table refuses, is a bug that the batch cannot pin on one item: it
 * throws, and the caller's transaction runs again item by item (report-verbs.ts). The events are
 * those completeLoaded writes, in the same order for each outcome.
 */
export async function completeMany(tx: TxContext, items: readonly PlainOutcome[]): Promise<Map<string, ReportItemOutcome>> {
  const decided = items.map((i) => ({ ...i, ...outcomeOf(i.c) }));
  const ended = await writeRows(
    tx,
    endAttempts,
    decided.map(({ a, c, state, outputs }) => [
      a.id,
      c.token,
      state,
      c.exitCode,
      c.signal,
      c.end.detail,
      c.end.kind,
      outputs,
      c.usage?.memoryPeakBytes ?? null,
      c.usage?.cpuSeconds ?? null,
      a.started_at ?? tx.now,
    ]),
    ROWS_PER_STATEMENT,
  );
  const out = new Map<string, ReportItemOutcome>();
  const accepted: (typeof decided)[number][] = [];
  for (const d of decided) {
    if (ended.has(d.a.id)) accepted.push(d);
    else out.set(d.a.id, { attemptId: d.a.id, result: 'stale', message: 'attempt changed while completing' });
  }

  // Each job's advancer over its stages as read, then every stage row each wrote, once per stage:
  // a stage changed twice by one advancer is written once, in its last form, guarded on its first state.
  const plans = new Map<string, OutcomePlan>();
  const stageWrites = new Map<string, { first: StageRow['state']; last: unknown[]; fencedOn: string | null; jobId: string; name: string }>();
  const jobWrites: unknown[][] = [];
  const moves = new Map<string, { from: JobState; to: JobState; failureReason: string | null }>();
  for (const d of accepted) {
    const plan = planOutcome(d.stages, { jobId: d.a.job_id, stageId: d.a.stage_id, attemptId: d.a.id, outcome: d.outcome, jitter: d.jitter, now: tx.now });
    plans.set(d.a.id, plan);
    for (const ch of plan.changes) {
      const [state, , attemptsUsed, lostUsed, readySince, notBefore, current, pending, finishedAt, endReason, output, id, from] = ch.write;
      const row = [state, attemptsUsed, lostUsed, readySince, notBefore, current, pending, finishedAt, endReason, output];
      const seen = stageWrites.get(id);
      if (seen) {
        seen.last = row;
        seen.fencedOn ??= ch.fencedOn;
      } else stageWrites.set(id, { first: from, last: row, fencedOn: ch.fencedOn, jobId: d.a.job_id, name: ch.before.name });
    }
    if (!plan.job) throw new Error(`internal: job ${d.a.job_id} is gone`);
    const move = jobMove(plan.job, plan.stagesAfter, d.a.job_id);
    moves.set(d.a.id, move);
    if (move.from !== move.to) jobWrites.push([d.a.job_id, move.from, move.to, isJobTerminal(move.to) ? 1 : 0, move.failureReason]);
  }
  const stagesWritten = await writeRows(
    tx,
    writeStages,
    [...stageWrites].map(([id, w]) => [id, w.first, w.fencedOn, ...w.last]),
    ROWS_PER_STATEMENT,
  );
  for (const [id, w] of stageWrites) {
    if (!stagesWritten.has(id)) throw new Error(`internal: stage ${w.name} of job ${w.jobId} changed under the advancer`);
  }
  const jobsMoved = await writeRows(tx, moveJobs, jobWrites, ROWS_PER_STATEMENT);

  for (const d of accepted) {
    const plan = plans.get(d.a.id)!;
    const move = moves.get(d.a.id)!;
    await tx.event(outcomeEvent(d.a, d.c, d.what, d.logCut));
    await tx.publish('capacity:freed', { machineId: d.a.machine_id });
    for (const ch of plan.changes) await tx.event(ch.event);
    for (const pool of plan.readyPools) await tx.publish('pool:ready', { pool });
    // Guarded on the state read, as moveJobTo: a job that was no longer there changed nothing and says nothing.
    if (move.from !== move.to && jobsMoved.has(d.a.job_id)) await recordJobStateChange(tx, d.a.job_id, move.from, move.to, move.failureReason);
    out.set(d.a.id, { attemptId: d.a.id, result: 'ok', jobState: move.to });
  }
  return out;
}
