import { sql } from 'kysely';
import { AttemptEndKind } from '../../domain/attempt-end.js';
import type { AttemptsTable } from '../schema.js';
import { planOutcome, stagesOfJobs } from './apply-outcome.js';
import { loseAttempt, lostSaid, type OverdueGuard } from './attempt-verbs.js';
import { prepared, preparedBySize } from './prepared-query.js';
import { REAP_BATCH } from './reap-batches.js';
import type { TxContext } from './tx-context.js';
import { keysOf, v, valuesTable, writeRows } from './values-table.js';
import { planEvents, StageMovedUnderAdvancer, writePlans, type JobPlan } from './write-plans.js';
import { aloneActive, lockLostRows, SerializableNeeded } from './loss-read-committed.js';

/** An active attempt the control plane judged lost, as read, with why, and (read outside the transaction) what must still hold when it is written. */
export interface Loss {
  a: AttemptsTable;
  reason: string;
  overdue?: OverdueGuard;
}

const LOSS_TYPES = ['text', 'integer', 'text', 'text', 'bigint', 'bigint'] as const;
/**
 * endActiveAttempt (attempt-verbs.ts) for many attempts, one statement for a whole reaper batch
 * (six values a row, 601 for REAP_BATCH, under the 1,024 a prepared text may take): each fenced on
 * the token and state read, and where given on its lease or acknowledgement still overdue.
 */
const loseAttempts = preparedBySize(REAP_BATCH, (n) =>
  prepared<unknown[]>()((db, [at, ...values]) =>
    db
      .updateTable('attempts')
      .from(valuesTable(values, LOSS_TYPES, n))
      .set({ state: 'lost', reason: v(4), end_kind: AttemptEndKind.lost, finished_at: at as number, lease_expires_at: null })
      .where(
        sql<boolean>`"attempts"."id" = v.column1 and "attempts"."token" = v.column2 and "attempts"."state" = v.column3
          and (v.column5 is null or "attempts"."lease_expires_at" < v.column5)
          and (v.column6 is null or "attempts"."scheduled_at" < v.column6)`,
      )
      .where('attempts.id', 'in', keysOf(values, LOSS_TYPES, n))
      .returning('id'),
  ),
);

/**
 * loseAttempt for a reaper's batch, set-based (docs/failure-detection.md, "A batch's losses
 * set-based"): one guarded update of the attempts, one read of their jobs' stages, the advancers'
 * stage and job writes in a statement or two each (writePlans), where one at a time it was four
 * round trips a loss (412 statements for 100). Each row's write checks what loseAttempt's checks
 * (the token and state read, the lease or acknowledgement still overdue at the transaction's time):
 * an attempt that moved since is left out and says nothing. Each lost attempt's stage gets the
 * decision loseAttempt's applyOutcome would give it (planOutcome: rerun after its backoff, or fail
 * with its job), and the same events and messages, in the list's order.
 *
 * Only an attempt of no gang, and the only one of its job in the batch, goes set-based: its job's
 * stages, read once, are then still as read when its advancer's writes land. A gang's member (its
 * loss ends its peers: endGang), or a second attempt of a job, goes loseAttempt's way, after the
 * set-based writes, reading its job afresh. Answers the attempts lost, in the list's order.
 */
export async function loseMany(tx: TxContext, losses: readonly Loss[], jitter: number): Promise<string[]> {
  const perJob = new Map<string, number>();
  for (const l of losses) perJob.set(l.a.job_id, (perJob.get(l.a.job_id) ?? 0) + 1);
  const plain = (l: Loss) => l.a.gang_id === null && perJob.get(l.a.job_id) === 1;
  const set = losses.filter(plain);
  // READ COMMITTED (loss-read-committed.ts): only a plain loss has a decision its rows can guard.
  if (tx.lossReadCommitted) {
    if (set.length !== losses.length) throw new SerializableNeeded('a gang member, or a second attempt of a job in the batch');
    // Before the attempts' write, none of them waited for, so the batch is in no circle of waits (loss-read-committed.ts).
    await lockLostRows(
      tx,
      set.map((l) => l.a.job_id),
      set.map((l) => l.a.id),
    );
  }
  const ended = await writeRows(
    tx,
    loseAttempts,
    set.map((l) => [l.a.id, l.a.token, l.a.state, l.reason, l.overdue?.leaseBefore ?? null, l.overdue?.scheduledBefore ?? null]),
    REAP_BATCH,
  );
  const lost = set.filter((l) => ended.has(l.a.id));
  const stages = await stagesOfJobs(
    tx,
    lost.map((l) => l.a.job_id),
  );
  if (tx.lossReadCommitted) {
    const fanned = lost.find((l) => !aloneActive(stages.get(l.a.job_id), l.a.stage_id));
    if (fanned) throw new SerializableNeeded(`job ${fanned.a.job_id} has another active stage`);
  }
  const written = await writeLossPlans(
    tx,
    lost.map(({ a, reason }) => ({
      jobId: a.job_id,
      plan: planOutcome(stages.get(a.job_id) ?? [], {
        jobId: a.job_id,
        stageId: a.stage_id,
        attemptId: a.id,
        outcome: { kind: 'lost', reason },
        jitter,
        now: tx.now,
      }),
    })),
  );
  const byId = new Map(written.map((w, i) => [lost[i]!.a.id, w]));
  const out: string[] = [];
  for (const l of losses) {
    if (!plain(l)) {
      if (await loseAttempt(tx, l.a, l.reason, jitter, true, l.overdue)) out.push(l.a.id);
      continue;
    }
    const w = byId.get(l.a.id);
    if (!w) continue;
    await lostSaid(tx, l.a, l.reason);
    await planEvents(tx, w);
    out.push(l.a.id);
  }
  return out;
}

/** writePlans; in a READ COMMITTED batch a stage found moved is a read its locks did not guard: the batch runs SERIALIZABLE. */
async function writeLossPlans(tx: TxContext, plans: readonly JobPlan[]) {
  try {
    return await writePlans(tx, plans);
  } catch (err) {
    if (tx.lossReadCommitted && err instanceof StageMovedUnderAdvancer) throw new SerializableNeeded(err.message);
    throw err;
  }
}
