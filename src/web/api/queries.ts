import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import type { HeldAttemptView } from '../../api/contract/held-attempt-view';
import type { JobSummaryView, JobView, MachineView, StageExplanation } from '../../api/contract/job-view';
import type { PoolHistoryView, PoolsView } from '../../api/contract/pool-view';
import type { AutoscaleView } from '../../api/contract/autoscale-view';
import type { RerunRequest, RerunResult } from '../../api/contract/rerun';
import { api, ApiError, enc, query } from './api-client';
import { queryKeys } from './query-keys';
import { isActiveAttemptState } from '../../api/contract/states';
import type { TeamView } from '../../api/contract/team-view';

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

/**
 * Whether a job changes now in ways no event tells: a stage runs (its progress travels with the
 * agents' heartbeats), or an ended attempt's process is still being stopped (its agent saying it is
 * gone releases it, and completes its log, without an event).
 */
export const changesUnseen = (job: JobView | undefined, now = Date.now()) =>
  job?.stages.some((s) => s.state === 'running' || s.attempts.some((a) => leaving(a, now))) ?? false;

/** How long an ended attempt's process is waited for: a kill takes seconds, a machine that died never reports back. */
const LEAVING_MS = 120_000;

/** Ended, its process still being stopped, for less than LEAVING_MS. */
const leaving = (a: { state: string; releasedAt?: number | null; finishedAt: number | null }, now: number) =>
  !isActiveAttemptState(a.state) && a.state !== 'lost' && a.releasedAt == null && now - (a.finishedAt ?? now) < LEAVING_MS;

export function useJob(id: string) {
  return useQuery({
    queryKey: queryKeys.job(id),
    queryFn: () => api<JobView>(`/v1/jobs/${enc(id)}`),
    retry: (n, err) => !(err instanceof ApiError && err.status === 404) && n < 2,
    // Re-read every 2 s while it changes unseen (above), as `gantry submit --watch` does on a
    // terminal; not at all otherwise.
    refetchInterval: (q) => (changesUnseen(q.state.data) ? 2000 : false),
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

/**
 * What runs where. An attempt that has ended but whose process is still being stopped holds its
 * machine's resources until its agent says the process is gone, which is no event: while one is
 * listed, the list is read every 2 s, and when one leaves it, machines and pools are read again.
 */
export function useHeldAttempts() {
  const client = useQueryClient();
  return useQuery({
    queryKey: queryKeys.attempts,
    queryFn: async () => {
      const before = client.getQueryData<HeldAttemptView[]>(queryKeys.attempts) ?? [];
      const now = (await api<{ attempts: HeldAttemptView[] }>('/v1/attempts')).attempts;
      const still = new Set(now.map((a) => a.attemptId));
      if (before.some((a) => !still.has(a.attemptId))) {
        void client.invalidateQueries({ queryKey: queryKeys.machines });
        void client.invalidateQueries({ queryKey: queryKeys.pools });
      }
      return now;
    },
    refetchInterval: (q) => (stillLeaving(q.state.data ?? [], Date.now()) ? 2000 : false),
  });
}

/** When each ended attempt was first seen still holding its resources: one on a machine that died never lets go, and is not waited for past 2 minutes. */
const leavingSince = new Map<string, number>();

function stillLeaving(held: readonly HeldAttemptView[], now: number): boolean {
  const ids = new Set<string>();
  let waiting = false;
  for (const a of held) {
    if (!!isActiveAttemptState(a.state)) continue;
    ids.add(a.attemptId);
    const since = leavingSince.get(a.attemptId) ?? now;
    leavingSince.set(a.attemptId, since);
    if (now - since < LEAVING_MS) waiting = true;
  }
  for (const id of leavingSince.keys()) if (!ids.has(id)) leavingSince.delete(id);
  return waiting;
}

export function usePools() {
  return useQuery({ queryKey: queryKeys.pools, queryFn: () => api<PoolsView>('/v1/pools') });
}

/** The autoscaler: pools, the machines it started, its decisions (GET /v1/autoscale); its `autoscale:*` events mark it stale. */
export function useAutoscale() {
  return useQuery({ queryKey: queryKeys.autoscale, queryFn: () => api<AutoscaleView>('/v1/autoscale') });
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

/** Teams, for the jobs filter. */
export function useTeams() {
  return useQuery({ queryKey: queryKeys.teams, queryFn: () => api<{ teams: TeamView[] }>('/v1/teams').then((r) => r.teams), staleTime: 60_000 });
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

/** The body of a rerun from one stage (docs/rerun.md): that stage and everything downstream run again. */
const rerunFrom = (stage: string, cancelRunning: boolean, dryRun: boolean): RerunRequest => ({
  from: [stage],
  ...(cancelRunning ? { cancelRunning: true } : {}),
  ...(dryRun ? { dryRun: true } : {}),
});

/**
 * What a rerun from `stage` would do (`dryRun`: nothing is written), while `enabled` (the dialog is
 * open). Its key is under the job's, so an event about the job reads it again: a job that ends
 * while the dialog shows "not ended" gets its plan. A refusal (4xx) is the answer, not a failure
 * to retry.
 */
export function useRerunPlan(id: string, stage: string, cancelRunning: boolean, enabled: boolean) {
  return useQuery({
    queryKey: queryKeys.rerunPlan(id, stage, cancelRunning),
    queryFn: () => api<RerunResult>(`/v1/jobs/${enc(id)}/rerun`, { method: 'POST', json: rerunFrom(stage, cancelRunning, true) }).then((r) => r.plan),
    enabled,
    retry: (n, err) => !(err instanceof ApiError && err.status >= 400 && err.status < 500) && n < 2,
    gcTime: 0,
  });
}

/**
 * The rerun itself. `key` is the dialog's Idempotency-Key: a double click, or a retry after an
 * answer that never came, sends the same key and body, and the server answers with the job the
 * first one made (200) instead of making another.
 */
export function useRerun(id: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (v: { stage: string; cancelRunning: boolean; key: string }) =>
      api<RerunResult>(`/v1/jobs/${enc(id)}/rerun`, {
        method: 'POST',
        headers: { 'idempotency-key': v.key },
        json: rerunFrom(v.stage, v.cancelRunning, false),
      }),
    onSuccess: (r) => {
      if (r.job) client.setQueryData(queryKeys.job(r.job.id), r.job);
      // The original now lists its rerun (and may have been canceled), and the lists have a new job.
      // Exact: the open dialog's plan (under the job's key) is not asked for again on the way out.
      void client.invalidateQueries({ queryKey: queryKeys.job(id), exact: true });
      void client.invalidateQueries({ queryKey: queryKeys.jobs });
    },
  });
}
