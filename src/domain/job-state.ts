import type { TransitionTable } from './transition-table.js';

/**
 * A job's state is derived from its stages (see `deriveJobState`); it is stored so that lists can
 * be filtered by it, and rewritten in the same transaction as every stage change.
 */
export const JobState = {
  /** Accepted; no stage is ready yet. The submit transaction moves it on at once. */
  submitted: 'submitted',
  /** Some stage waits in a pool's queue and none has been placed or has run yet. */
  queued: 'queued',
  /** A stage has been placed on a machine and none is running or has finished yet. */
  scheduled: 'scheduled',
  /** A stage is running, or some stage has finished and others still have work to do. */
  running: 'running',
  /** Every stage succeeded. Terminal. */
  succeeded: 'succeeded',
  /** A stage failed after its retries; what depended on it was skipped. Terminal. */
  failed: 'failed',
  /** A user canceled it. Terminal. */
  canceled: 'canceled',
} as const;
export type JobState = (typeof JobState)[keyof typeof JobState];
export const jobStates = Object.values(JobState);

// A job can move back to `queued` or `scheduled`: a lost machine sends its stage back to the queue.
export const jobTransitions: TransitionTable<JobState> = {
  submitted: ['queued', 'scheduled', 'running', 'succeeded', 'failed', 'canceled'],
  queued: ['scheduled', 'running', 'succeeded', 'failed', 'canceled'],
  scheduled: ['queued', 'running', 'succeeded', 'failed', 'canceled'],
  running: ['queued', 'scheduled', 'succeeded', 'failed', 'canceled'],
  succeeded: [],
  failed: [],
  canceled: [],
};

export function isJobTerminal(s: JobState): boolean {
  return jobTransitions[s].length === 0;
}
