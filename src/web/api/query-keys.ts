/**
 * Every query the dashboard makes, by key. Keys nest: invalidating `job(id)` also invalidates
 * that job's explanations, and `jobs` every filtered list.
 */
export const queryKeys = {
  whoami: (token: string | null) => ['whoami', token] as const,
  jobs: ['jobs'] as const,
  jobList: (filters: { state?: string; team?: string; name?: string }, pages: number) => ['jobs', filters, pages] as const,
  job: (id: string) => ['job', id] as const,
  /** Every job's queries (each job, its explanations): what an event that names no job but changes explain makes stale. */
  anyJob: ['job'] as const,
  explain: (id: string, stage: string) => ['job', id, 'explain', stage] as const,
  // Under the job: a change to the job (an event) re-reads the plan of an open rerun dialog.
  rerunPlan: (id: string, stage: string, cancelRunning: boolean) => ['job', id, 'rerun-plan', stage, cancelRunning] as const,
  logs: (id: string, stage: string, attempt: number) => ['logs', id, stage, attempt] as const,
  machines: ['machines'] as const,
  attempts: ['attempts'] as const,
  pools: ['pools'] as const,
  autoscale: ['autoscale'] as const,
  poolHistory: (windowMs: number) => ['pool-history', windowMs] as const,
  teams: ['teams'] as const,
};

export type QueryKey = readonly unknown[];
