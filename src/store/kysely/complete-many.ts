import { sql } from 'kysely';
import { activeAttemptStates } from '../../domain/attempt-state.js';
import type { AttemptCompletion, ReportItemOutcome } from '../store.js';
import { type JobStageRows, planOutcome } from './apply-outcome.js';
import { outcomeEvent, outcomeOf, type ReportedAttempt } from './attempt-verbs.js';
import { prepared, preparedBySize } from './prepared-query.js';
import type { TxContext } from './tx-context.js';
import { keysOf, v, valuesTable, writeRows } from './values-table.js';
import { planEvents, ROWS_PER_STATEMENT, writePlans } from './write-plans.js';

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
      .where('attempts.id', 'in', keysOf(values, ATTEMPT_TYPES, n))
      .where('attempts.state', 'in', activeAttemptStates)
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

  // Each job's advancer over its stages as read, written set-based (writePlans).
  const written = await writePlans(
    tx,
    accepted.map((d) => ({
      jobId: d.a.job_id,
      plan: planOutcome(d.stages, { jobId: d.a.job_id, stageId: d.a.stage_id, attemptId: d.a.id, outcome: d.outcome, jitter: d.jitter, now: tx.now }),
    })),
  );
  for (const [i, d] of accepted.entries()) {
    const w = written[i]!;
    await tx.event(outcomeEvent(d.a, d.c, d.what, d.logCut));
    await tx.publish('capacity:freed', { machineId: d.a.machine_id });
    await planEvents(tx, w);
    out.set(d.a.id, { attemptId: d.a.id, result: 'ok', jobState: w.move.to });
  }
  return out;
}
