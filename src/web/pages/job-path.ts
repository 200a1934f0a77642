/** A job page's address, at one of its stages: `/jobs/job_01…?stage=train`. */
export const jobPath = (id: string, stage?: string | null): string => `/jobs/${encodeURIComponent(id)}${stage ? `?stage=${encodeURIComponent(stage)}` : ''}`;
