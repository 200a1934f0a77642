import type { Clock } from '../domain/clock.js';
import { stageReasonNow } from '../scheduler/stage-reason-now.js';
import type { Store } from '../store/store.js';
import type { ReconcilerDuty } from './reconciler-duty.js';

export interface QueueTimeoutSettings {
  queueTimeoutIntervalMs: number;
  /** At most this many overdue stages a pass; the rest wait for the next. */
  queueTimeoutBatch: number;
}

/**
 * Ready stages that waited past their queueTimeoutSeconds fail, saying why they waited (the
 * pending reason now, as `explain` would say it). Returns `jobId/stage` of each one failed.
 */
export function queueTimeout(store: Store, clock: Clock, s: QueueTimeoutSettings): ReconcilerDuty<string[]> {
  return {
    name: 'queue-timeout',
    intervalMs: s.queueTimeoutIntervalMs,
    async runOnce() {
      const timedOut: string[] = [];
      const overdue = await store.stagesPastQueueTimeout({ now: clock.now(), limit: s.queueTimeoutBatch });
      if (!overdue.length) return timedOut;
      const { machines: cluster } = await store.clusterView();
      for (const st of overdue) {
        const why = stageReasonNow(st.definition, cluster) ?? 'a machine had room, but no pass placed it in time';
        const reason = `waited ${Math.round(st.waitedMs / 1000)} s in the queue, past its queueTimeoutSeconds (${st.definition.queueTimeoutSeconds}): ${why}`;
        if (await store.stageQueueTimeout({ stageId: st.stageId, reason, now: clock.now() })) timedOut.push(`${st.jobId}/${st.name}`);
      }
      return timedOut;
    },
  };
}
