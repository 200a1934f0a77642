import { isErrorCode, type ErrorCode } from '../../api/contract/error-codes.js';
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

/** Whatever a failed answer carried, as an ApiErrorBody: proxies and crashed servers answer with HTML or nothing. */
export function errorBodyOf(status: number, statusText: string, text: string): ApiErrorBody {
  try {
    const parsed = JSON.parse(text) as Partial<ErrorBody>;
    if (parsed && typeof parsed.message === 'string') {
      return { error: isErrorCode(parsed.error) ? parsed.error : `http_${status}`, message: parsed.message, issues: parsed.issues };
    }
  } catch {
    // not JSON; fall through
  }
  const snippet = text.trim().slice(0, 200);
  return { error: `http_${status}`, message: `HTTP ${status} ${statusText}${snippet ? `: ${snippet}` : ''}` };
}
