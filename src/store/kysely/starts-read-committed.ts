/**
 * An agent's report of starts alone, READ COMMITTED on PostgreSQL (docs/store-contract.md, "A
 * report of starts READ COMMITTED"; docs/throughput.md, "Reports refused at their append (branch
 * `refusals`)").
 *
 * Why: SERIALIZABLE, two reports that ran at once were each other's reader and writer through the
 * btree pages their rows share (ids grow with time, so the attempts, stages and jobs placed
 * together sit on the same leaf pages; a read by id locks the page, and a change of an indexed
 * column, such as `state`, adds an entry to every index of the row, the primary key's page
 * included). The first to commit marked the other to fail, and it failed at its next write: its
 * events' append, after its wait for the append lock. 68 % of the reports of a 2,000-agent fleet
 * on PostgreSQL × 2 were refused, most of them acknowledgements of starts.
 *
 * What keeps a start right without SERIALIZABLE: each of its writes is guarded on its own row and
 * re-checked by PostgreSQL on the row's newest version (an attempt still `scheduled`, its stage
 * still `scheduled` with it as the current attempt, its job still in the state read). Whatever
 * else could make a start wrong changes the attempt's row first: a cancel, a loss, a preemption,
 * a job's failure end the attempt (`endActiveAttempt` and the advancer's skips, guarded on the
 * same row), so a start after them finds it no longer `scheduled` and changes nothing (stale, as
 * SERIALIZABLE answered after its rerun); one that locked the attempt's row first makes them wait
 * for its commit and run again (a SERIALIZABLE update of a row changed since its snapshot is
 * refused), and they then end a running attempt, which its agent is told to kill. Read
 * COMMITTED, a report takes no predicate locks and none are checked against it: it can be no
 * transaction's pivot, nor make one of another.
 *
 * Which starts: acknowledgements before the spawn (no pid), of no gang, each named once in the
 * report, found `scheduled` on the reporting machine with the report's token, on the transaction's
 * first run; all of them, two of one job included, in one guarded statement per table
 * (attempt-verbs.ts startMany), every row found as it was read and each job's row written, a job
 * staying `running` too (review fixes: docs/store-contract.md). Anything else (an outcome, a pid, a
 * gang's member, a stale or repeated item, an item the database refuses, a row changed since it was
 * read, a rerun with savepoints) throws StartsNeedSerializable, the transaction rolled back, and the
 * report runs SERIALIZABLE as before; a pid or an outcome is known before the transaction, and such
 * a report runs SERIALIZABLE at once.
 */
export class StartsNeedSerializable extends Error {
  constructor(readonly why: string) {
    super(`a report needs SERIALIZABLE: ${why}`);
    this.name = 'StartsNeedSerializable';
  }
}
