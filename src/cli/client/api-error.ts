import type { ErrorBody } from '../../api/contract/job-view.js';

/** The server answered, but not with success; `body` is its ErrorBody (synthesised when it sent none). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(body.message);
    this.name = 'ApiError';
  }
}
