import { isStageTerminal, StageState } from '../../domain/stage-state.js';
import type { JobStageRows } from './apply-outcome.js';
import type { TxContext } from './tx-context.js';

/**
 * A loss in a READ COMMITTED batch whose decision rests on a read no row lock stands for (a gang's
 * member, a second attempt of a job in the batch, a job with another active stage): the batch
 * writes nothing and runs again SERIALIZABLE, as every loss batch did before
 * (docs/failure-detection.md, "A loss batch READ COMMITTED").
 */
export class SerializableNeeded extends Error {
  constructor(readonly why: string) {
    super(`a loss batch needs SERIALIZABLE: ${why}`);
    this.name = 'SerializableNeeded';
  }
}

/**
 * The lost attempts' jobs' rows locked (`for update`, in id order), then the attempts' own, before
 * anything is written and before their stages are read. Every transaction that cancels, fails or
 * ends a job writes its row (jobCancel first of all), so once these locks are held the stages'
 * read, a statement that begins after every such writer committed, sees what they wrote; and each
 * writer that comes later waits for this batch's commit, then finds what it wrote (or is refused,
 * SERIALIZABLE, and runs again on it).
 *
 * Neither lock is waited for (`nowait`): a row another transaction holds sends the batch to
 * SERIALIZABLE at once. No one order suits every writer: a cancel takes the job's row and then its
 * attempts', an acknowledgement or a report the attempt's, its stage's and then the job's (found
 * in review: an acknowledgement that came as its deadline passed, its job still `scheduled`,
 * waited on the batch that held the job and waited on the attempt, a deadlock PostgreSQL broke
 * only after a second). A batch that waits for no lock is in no such circle.
 */
export async function lockLostRows(tx: TxContext, jobIds: readonly string[], attemptIds: readonly string[]): Promise<void> {
  const jobs = [...new Set(jobIds)].sort();
  const attempts = [...new Set(attemptIds)].sort();
  try {
    if (jobs.length > 0) await tx.db.selectFrom('jobs').select('id').where('id', 'in', jobs).orderBy('id').forUpdate().noWait().execute();
    if (attempts.length > 0) await tx.db.selectFrom('attempts').select('id').where('id', 'in', attempts).orderBy('id').forUpdate().noWait().execute();
  } catch (err) {
    // 55P03, lock_not_available: a writer holds one of them now.
    if ((err as { code?: unknown }).code === '55P03') throw new SerializableNeeded('a row it would lock is being written');
    throw err;
  }
}

/**
 * Whether the lost stage is its job's one active stage: every other stage terminal or `pending`.
 * A placement, an acknowledgement or a report moves one stage without writing its job's row when
 * the job's state does not change, so the job's lock guards the advancer's decision only when no
 * other stage can move: a pending stage waits on an upstream that is terminal or this one, and
 * nothing but this stage's own outcome (whose attempt row the batch holds) or a write of the job's
 * row (which waits for the batch) moves it.
 */
export function aloneActive(stages: JobStageRows | undefined, stageId: string): boolean {
  if (!stages) return false;
  return stages.every((s) => s.id === stageId || s.state === StageState.pending || isStageTerminal(s.state));
}
