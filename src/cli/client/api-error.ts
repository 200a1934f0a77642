import type { ErrorCode } from '../../api/contract/error-codes.js';
import type { ErrorBody } from '../../api/contract/job-view.js';

/** An ErrorBody as the client holds it: the server's code, or `http_<status>` when the answer was not Gantry's (a proxy's page, a crash). */
export interface ApiErrorBody extends Omit<ErrorBody, 'error'> {
  error: ErrorCode | `http_${number}`;
}

/** The server answered, but not with success; `body` is its ErrorBody (synthesised when it sent none). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ApiErrorBody,
    /** A 429's Retry-After, in seconds. */
    readonly retryAfter: number | null = null,
  ) {
    super(body.message);
    this.name = 'ApiError';
  }
}
