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
 * The lost attempts' jobs' rows locked (`for update`, in id order), before their stages are read.
 * Every transaction that cancels, fails or ends a job writes its row (jobCancel first of all), so
 * once these locks are held the stages' read, a statement that begins after every such writer
 * committed, sees what they wrote; and each writer that comes later waits for this batch's commit,
 * then finds what it wrote (or is refused, SERIALIZABLE, and runs again on it).
 */
export async function lockLostJobs(tx: TxContext, jobIds: readonly string[]): Promise<void> {
  const ids = [...new Set(jobIds)].sort();
  if (ids.length === 0) return;
  await tx.db.selectFrom('jobs').select('id').where('id', 'in', ids).orderBy('id').forUpdate().execute();
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
