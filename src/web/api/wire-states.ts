/**
 * The job states the API answers, in their lifecycle's order (docs/state-machines.md), for the
 * jobs page's filter and the order of a job's stage counts. The wire types in src/api/contract
 * carry states as strings today; when the contract exports the unions (issue 11, "the contract
 * owns the wire"), these lists come from there.
 */
export const JOB_STATES = ['submitted', 'queued', 'scheduled', 'running', 'succeeded', 'failed', 'canceled'] as const;
export const STAGE_STATES = ['pending', 'ready', 'scheduled', 'running', 'succeeded', 'failed', 'canceled', 'skipped'] as const;

/** A job or stage that will not change again. */
export const isEnded = (state: string): boolean => ['succeeded', 'failed', 'canceled', 'skipped'].includes(state);

/** An attempt that has ended (succeeded, failed, lost, preempted, canceled): only scheduled and running ones go on. */
export const isAttemptEnded = (state: string): boolean => state !== 'scheduled' && state !== 'running';
