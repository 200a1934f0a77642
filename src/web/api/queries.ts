import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import type { HeldAttemptView } from '../../api/contract/held-attempt-view';
import type { JobSummaryView, JobView, MachineView, StageExplanation } from '../../api/contract/job-view';
import type { PoolHistoryView, PoolsView } from '../../api/contract/pool-view';
import { api, ApiError, enc, query } from './api-client';
import { queryKeys } from './query-keys';

/**
 * The API's answers, as react-query hooks. None polls: the event stream marks them stale
 * (live-events.tsx), except where the data changes without an event (said at each).
 */

export interface JobFilters {
  state?: string;
  team?: string;
  name?: string;
}

export const PAGE = 50;

/** Newest first, `pages` pages of 50 deep (one request: the list is re-read whole when an event says it changed). */
export function useJobs(filters: JobFilters, pages: number) {
  return useQuery({
    queryKey: queryKeys.jobList(filters, pages),
    queryFn: () => api<{ jobs: JobSummaryView[] }>(`/v1/jobs${query({ ...filters, limit: Math.min(1000, PAGE * pages) })}`).then((r) => r.jobs),
    placeholderData: keepPreviousData,
  });
}

/** Whether a job has a stage running: its progress bars and clocks change without events. */
export const isRunning = (job: JobView | undefined) => job?.stages.some((s) => s.state === 'running') ?? false;

export function useJob(id: string) {
  return useQuery({
    queryKey: queryKeys.job(id),
    queryFn: () => api<JobView>(`/v1/jobs/${enc(id)}`),
    retry: (n, err) => !(err instanceof ApiError && err.status === 404) && n < 2,
    // Progress travels with the agents' heartbeats, not as events: re-read every 2 s while a stage
    // runs, as `gantry submit --watch` does on a terminal. Nothing is read while none runs.
    refetchInterval: (q) => (isRunning(q.state.data) ? 2000 : false),
  });
}

export function useExplain(id: string, stage: string, enabled: boolean) {
  return useQuery({
    queryKey: queryKeys.explain(id, stage),
    queryFn: () => api<StageExplanation>(`/v1/jobs/${enc(id)}/stages/${enc(stage)}/explain`),
    enabled,
  });
}

export function useMachines() {
  return useQuery({ queryKey: queryKeys.machines, queryFn: () => api<{ machines: MachineView[] }>('/v1/machines').then((r) => r.machines) });
}

export function useHeldAttempts() {
  return useQuery({ queryKey: queryKeys.attempts, queryFn: () => api<{ attempts: HeldAttemptView[] }>('/v1/attempts').then((r) => r.attempts) });
}

export function usePools() {
  return useQuery({ queryKey: queryKeys.pools, queryFn: () => api<PoolsView>('/v1/pools') });
}

/** The pools over the last `windowMs`: read again at the server's sample interval (at least 5 s), the one loop the charts need. */
export function usePoolHistory(windowMs: number) {
  return useQuery({
    queryKey: queryKeys.poolHistory(windowMs),
    queryFn: () => api<PoolHistoryView>(`/v1/pools/history${query({ since: Date.now() - windowMs, max: 400 })}`),
    refetchInterval: (q) => Math.max(5000, q.state.data?.intervalMs ?? 15_000),
    placeholderData: keepPreviousData,
  });
}

/** Team names, for the jobs filter. (Only the names: contract/team-view.ts reaches into domain/ for its name pattern, which a browser build has no use for.) */
export function useTeams() {
  return useQuery({ queryKey: queryKeys.teams, queryFn: () => api<{ teams: { name: string }[] }>('/v1/teams').then((r) => r.teams), staleTime: 60_000 });
}

export function useCancelJob(id: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: () => api<{ changed: boolean; job: JobView }>(`/v1/jobs/${enc(id)}/cancel`, { method: 'POST' }),
    onSuccess: (r) => {
      client.setQueryData(queryKeys.job(id), r.job);
      void client.invalidateQueries({ queryKey: queryKeys.jobs });
    },
  });
}
