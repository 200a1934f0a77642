import { stageReasonNow } from '../scheduler/stage-reason-now.js';
import type { JobDetail } from '../store/records.js';
import type { Store } from '../store/store.js';
import { quotaReasons } from './quota-reasons.js';

/**
 * Why each ready stage of a job waits, asked of the cluster as it is now. Scheduler passes do not
 * write reasons (a pass costs what it places, not what waits), so they are computed here when a
 * person looks. A stage still backing off keeps the advancer's reason ("retrying: backing off
 * until …"); a stage that some machine has room for keeps whatever the advancer said, if anything.
 */
export async function withLivePendingReasons(store: Store, job: JobDetail, now: number): Promise<JobDetail> {
  const waiting = job.stages.filter((s) => s.state === 'ready' && !(s.notBefore !== null && s.notBefore > now));
  if (waiting.length === 0) return job;
  const { machines } = await store.clusterView();
  // A team at its quota waits on that first, whatever room the machines have.
  const quota = await quotaReasons(store, job.team, waiting, machines);
  const reasons = new Map(waiting.map((s) => [s.id, quota.get(s.id) ?? stageReasonNow(s.definition, machines)]));
  return { ...job, stages: job.stages.map((s) => (reasons.get(s.id) ? { ...s, pendingReason: reasons.get(s.id)! } : s)) };
}
