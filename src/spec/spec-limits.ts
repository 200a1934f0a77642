/** How large a spec, a batch and a job file may be: the server refuses more, and the CLI says so before sending. */

/** The largest single job spec (text or body). */
export const MAX_SPEC_BYTES = 1024 * 1024;
/** Jobs in one batch at most (a sweep expands to at most this many too). */
export const MAX_BATCH_JOBS = 10_000;
/** The largest batch body (the route's own limit; a single job's is MAX_SPEC_BYTES), and the largest job file. */
export const MAX_BATCH_BYTES = 32 * 1024 * 1024;
