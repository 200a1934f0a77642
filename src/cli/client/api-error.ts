import type { ErrorBody } from '../../api/contract/job-view.js';

/** The server answered, but not with success; `body` is its ErrorBody (synthesised when it sent none). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
    /** A 429's Retry-After, in seconds. */
    readonly retryAfter: number | null = null,
  ) {
    super(body.message);
    this.name = 'ApiError';
  }
}
