import { describe, expect, it } from 'vitest';
import { staleQueries, StaleSet } from './event-invalidation';

describe('event invalidation', () => {
  it('a stage event makes its job, the lists and the pools stale', () => {
    expect(staleQueries({ type: 'stage:running', jobId: 'job_1' })).toEqual([['job', 'job_1'], ['jobs'], ['pools']]);
  });

  it('an attempt event also makes machines and what runs where stale', () => {
    expect(staleQueries({ type: 'attempt:succeeded', jobId: 'job_1' })).toEqual([['job', 'job_1'], ['jobs'], ['machines'], ['attempts'], ['pools']]);
  });

  it('a machine event touches no job; a token event nothing shown', () => {
    expect(staleQueries({ type: 'machine:lost', jobId: null })).toEqual([['machines'], ['attempts'], ['pools'], ['autoscale']]);
    expect(staleQueries({ type: 'team:changed', jobId: null })).toEqual([['teams'], ['pools']]);
    expect(staleQueries({ type: 'token:created', jobId: null })).toEqual([]);
  });

  it("an autoscaler's decision makes the autoscaler, the machines, the pools and the jobs' explanations stale", () => {
    expect(staleQueries({ type: 'autoscale:start', jobId: null })).toEqual([['autoscale'], ['machines'], ['pools'], ['job']]);
    expect(staleQueries({ type: 'autoscale:drain', jobId: null })).toEqual([['autoscale'], ['machines'], ['pools'], ['job']]);
  });

  it('a burst of events is one refetch of each query', () => {
    const set = new StaleSet();
    for (let i = 0; i < 100; i++) set.add({ type: i % 2 ? 'stage:ready' : 'attempt:running', jobId: `job_${i % 3}` });
    const keys = set
      .flush()
      .map((k) => JSON.stringify(k))
      .sort();
    expect(keys).toEqual(['["attempts"]', '["job","job_0"]', '["job","job_1"]', '["job","job_2"]', '["jobs"]', '["machines"]', '["pools"]']);
    expect(set.size).toBe(0);
  });
});
