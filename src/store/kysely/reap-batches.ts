import { StoreBusyError } from '../../domain/errors.js';
import type { ReapResult } from '../store.js';

/**
 * Silent machines, or overdue attempts, judged to a transaction by the reapers (machinesReap,
 * attemptsReap). One to a transaction, a rack of 1,000 lost at once was 1,000 commits, one after
 * another, each with its own pass before the commit (docs/failure-detection.md, "A mass loss");
 * 100 keeps a batch's rows few enough that a conflict with a live machine's writer is rare, and
 * its rerun short.
 */
// The fleet test's failures beside three busy loops (a live member judged lost, its stage run
// twice) are the load's, not the batches': one machine to a transaction failed 1 run of 3 there
// too (docs/failure-detection.md, "A mass loss").
export const REAP_BATCH = 100;

/**
 * How often a batch of more than one is tried before it is split in two. A batch refused this often
 * is in a conflict that its next try is likely to meet again (a report or a pass writing one of its
 * rows): halves that leave the conflicting row in one of them commit the rest now, rather than the
 * whole batch waiting out twenty tries and then going one by one.
 */
export const BATCH_TRIES = 3;

/**
 * Judges `items` REAP_BATCH to a transaction (`judge` runs one transaction for its batch). A batch
 * the database refuses BATCH_TRIES times is split in two, each half judged on its own, down to
 * single items, which get the store's full tries; a single item still refused is left to the next
 * pass (counted in `deferred`), so a conflict holds back only the item it is about, never the pass.
 * A pass of one item places before its commit, as before batches (a single lost machine's stage
 * placed in the transaction that readies it); a larger one leaves placement to the scheduler loop,
 * which its messages wake.
 *
 * `fromEnd`: the batches taken from the end of the list (each still in the list's order inside).
 * The lost-attempts duty walks its attempts so, the machine reaper from the start: in a rack's loss
 * both find the same attempts (their leases run out as their machines are lost), and walking them
 * from both ends each loses its own half at once, the two meeting in one batch, instead of one
 * waiting on the other's rows batch after batch. Inside a batch rows are still taken in the one
 * order, so the batch where they meet cannot deadlock.
 */
export async function reapInBatches<T>(
  items: readonly T[],
  judge: (batch: readonly T[], o: { place: boolean; maxTries?: number }) => Promise<ReapResult>,
  o: { fromEnd?: boolean } = {},
): Promise<ReapResult> {
  const result: ReapResult = { machines: [], lostAttempts: [] };
  let deferred = 0;
  const place = items.length === 1;
  const run = async (batch: readonly T[]): Promise<void> => {
    try {
      const r = await judge(batch, batch.length > 1 ? { place, maxTries: BATCH_TRIES } : { place });
      result.machines.push(...r.machines);
      result.lostAttempts.push(...r.lostAttempts);
    } catch (err) {
      if (!(err instanceof StoreBusyError)) throw err;
      if (batch.length === 1) {
        deferred++;
        return;
      }
      const half = Math.ceil(batch.length / 2);
      await run(batch.slice(0, half));
      await run(batch.slice(half));
    }
  };
  const starts: number[] = [];
  for (let i = 0; i < items.length; i += REAP_BATCH) starts.push(i);
  if (o.fromEnd === true) starts.reverse();
  for (const i of starts) await run(items.slice(i, i + REAP_BATCH));
  return deferred ? { ...result, deferred } : result;
}

/**
 * Runs what it is given one at a time, in the order given: the two reapers' batches, which a rack's
 * loss sends after the same attempts at the same moment (a machine's attempts' leases run out as
 * it is found lost). Side by side, each batch's write met the other's rows: on PostgreSQL × 2 at
 * 5,000 agents with 500 stopped, 43 of 101 batches were refused three times and split, the two
 * duties' batches refused together, pass after pass (docs/failure-detection.md, "A batch's losses
 * set-based"). Taking turns, a batch finds the rows the other lost already lost, and its guarded
 * write passes them over. Each batch is a few statements, so a turn is short.
 */
export function takeTurns(): <R>(run: () => Promise<R>) => Promise<R> {
  let last: Promise<unknown> = Promise.resolve();
  return (run) => {
    const mine = last.then(run, run);
    last = mine.catch(() => undefined);
    return mine;
  };
}
