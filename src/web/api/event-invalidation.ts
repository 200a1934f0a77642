import type { EventView } from '../../api/contract/job-view';
import { queryKeys, type QueryKey } from './query-keys';

/**
 * What an event makes stale: the dashboard keeps no state of its own beyond the API's answers,
 * and an event says which of them changed (the event is a hint, the API the truth: DESIGN.md).
 * - a job's, stage's or attempt's event: that job, and the job lists (states, stage counts);
 * - a stage's or a job's: the pools too (queues change when stages become ready or leave);
 * - an attempt's: also machines, what runs where, and the pools (allocation);
 * - a machine's: machines, what runs where, pools, the autoscaler (its machines' attempts);
 * - a team's: teams and pools (quotas);
 * - the autoscaler's (`autoscale:*`, its decisions): the autoscaler, machines (pool, lifecycle, a
 *   drain's cordon), pools, and the job on screen (explain's word on its held stages).
 */
export function staleQueries(e: Pick<EventView, 'type' | 'jobId'>): QueryKey[] {
  const noun = e.type.split(':')[0];
  const keys: QueryKey[] = [];
  const job = () => {
    if (e.jobId) keys.push(queryKeys.job(e.jobId));
    keys.push(queryKeys.jobs);
  };
  switch (noun) {
    case 'job':
    case 'stage':
      job();
      keys.push(queryKeys.pools);
      break;
    case 'attempt':
      job();
      keys.push(queryKeys.machines, queryKeys.attempts, queryKeys.pools);
      break;
    case 'machine':
      keys.push(queryKeys.machines, queryKeys.attempts, queryKeys.pools, queryKeys.autoscale);
      break;
    case 'autoscale':
      // Every job's: a start or a join changes what explain says of the stages held for the
      // machine, and the event names no job. Only the job on screen is read again.
      keys.push(queryKeys.autoscale, queryKeys.machines, queryKeys.pools, queryKeys.anyJob);
      break;
    case 'team':
      keys.push(queryKeys.teams, queryKeys.pools);
      break;
    default:
      // Other nouns (token, leader) change nothing the dashboard caches.
      break;
  }
  return keys;
}

/**
 * Gathers the stale keys of a burst of events into one set, so that a hundred events in a moment
 * cost one refetch of each query, not a hundred. `flush` hands them over and starts afresh.
 */
export class StaleSet {
  private readonly keys = new Map<string, QueryKey>();

  add(e: Pick<EventView, 'type' | 'jobId'>): void {
    for (const k of staleQueries(e)) this.keys.set(JSON.stringify(k), k);
  }

  get size(): number {
    return this.keys.size;
  }

  flush(): QueryKey[] {
    const out = [...this.keys.values()];
    this.keys.clear();
    return out;
  }
}
