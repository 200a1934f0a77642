import type { Clock } from '../domain/clock.js';
import { stageNeed } from '../scheduler/checks.js';
import { pendingReasonNow } from '../scheduler/pending-reason.js';
import type { Store } from '../store/store.js';

export interface ReconcileSettings {
  suspectAfterMs: number;
  lostAfterMs: number;
  ackTimeoutMs: number;
  /** Jobs unchanged this long are re-evaluated by the advancer. */
  repairAfterMs: number;
  /** Jobs that ended this long ago are deleted, with their logs, events and references to outputs. */
  retentionMs: number;
}

/**
 * One reconciler pass: make the database agree with the world as heartbeats describe it.
 * Silent machines become suspect, then lost with their attempts; running attempts whose lease
 * expired and assignments never acknowledged are lost, and their stages go back to the queue;
 * jobs that have not moved for a while are re-evaluated, so none can wait forever; and what has
 * been kept long enough (published outbox rows, ended jobs past retention) is deleted.
 */
export async function reconcilePass(
  store: Store,
  clock: Clock,
  s: ReconcileSettings,
  random: () => number = Math.random,
  /** Removes attempt directories written before 0014 that no job names a file in any more. */
  removeLegacyDirs: (attemptIds: string[]) => Promise<void> = async () => {},
  /** Where the repair's sweep over jobs stands; kept by the caller from one pass to the next. */
  cursor: { repair: string | null } = { repair: null },
) {
  const machines = await store.machinesReap({
    now: clock.now(),
    suspectAfterMs: s.suspectAfterMs,
    lostAfterMs: s.lostAfterMs,
    jitter: random(),
  });
  const attempts = await store.attemptsReap({ now: clock.now(), ackTimeoutMs: s.ackTimeoutMs, jitter: random() });
  // Ready stages that waited past their queueTimeoutSeconds fail, saying why they waited.
  const queueTimedOut: string[] = [];
  const overdue = await store.stagesPastQueueTimeout({ now: clock.now(), limit: 100 });
  if (overdue.length) {
    const { machines: cluster } = await store.clusterView();
    for (const st of overdue) {
      const why = pendingReasonNow(stageNeed(st.definition), cluster) ?? 'a machine had room, but no pass placed it in time';
      const reason = `waited ${Math.round(st.waitedMs / 1000)} s in the queue, past its queueTimeoutSeconds (${st.definition.queueTimeoutSeconds}): ${why}`;
      if (await store.stageQueueTimeout({ stageId: st.stageId, reason, now: clock.now() })) queueTimedOut.push(`${st.jobId}/${st.name}`);
    }
  }
  const repair = await store.jobsRepair({ now: clock.now(), staleAfterMs: s.repairAfterMs, limit: 100, after: cursor.repair });
  cursor.repair = repair.next;
  const repairedJobs = repair.moved;
  // Published outbox rows are kept an hour (for a look when debugging), then dropped.
  await store.outboxPrune({ before: clock.now() - 3_600_000 });
  // Idempotency-Keys answer retries for a day (IETF's draft and Stripe keep them 24 h).
  await store.idempotencyPrune({ before: clock.now() - 24 * 3_600_000 });
  // Retention: ended jobs go after `retentionMs`, with their references to outputs; outputs no
  // job names any more go at the next artifact collection (docs/rerun.md), old directories now.
  const expired = await store.jobsExpire({ finishedBefore: clock.now() - s.retentionMs, limit: 100, now: clock.now() });
  if (expired.legacyDirs.length) await removeLegacyDirs(expired.legacyDirs);
  return { machines: machines.machines, lostAttempts: [...machines.lostAttempts, ...attempts.lostAttempts], repairedJobs, expiredJobs: expired.jobs, queueTimedOut };
}
