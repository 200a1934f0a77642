/**
 * The `error` of every error answer (ErrorBody): a code for programs, beside the message for
 * people. The API sends these and no other (src/api/error-handler.ts maps each error class to one).
 */
export const ERROR_CODES = [
  /** 400: a body, query or spec that is wrong; `issues` names each problem's path. */
  'invalid_request',
  /** 400: a body that is not JSON. */
  'invalid_json',
  /** 400: another request the server cannot take as sent (its message says why). */
  'bad_request',
  /** 401: no token, or one not (or no longer) valid. */
  'unauthenticated',
  /** 403: a known token asking for what it does not allow. */
  'forbidden',
  /** 404: no such job, stage, log, machine, team, token or route (another team's job is this too). */
  'not_found',
  /** 409: the request conflicts with the current state (cancel an ended job, delete a running one). */
  'conflict',
  /** 409: an agent's report about an attempt that is no longer current: the agent must kill it. */
  'stale_attempt',
  /** 413: a body over the route's limit. */
  'body_too_large',
  /** 413: an output upload over what the stage's or the team's output limits leave (docs/security.md); nothing of it was kept. */
  'outputs_too_large',
  /** 415: a content type the route does not take. */
  'unsupported_media_type',
  /** 429: too many requests from one token; Retry-After says when to come back. */
  'rate_limited',
  /** 429: a token holding as many streams open (events, followed logs) as the server allows it; close one. */
  'too_many_streams',
  /** 429: an idle heartbeat shed by a server past its heartbeat budget; its arrival counted; Retry-After says when to send the next. */
  'heartbeat_shed',
  /** 503: the database kept refusing the transaction (concurrent writers); nothing was written, try again. */
  'busy',
  /** 500: a fault of the server's own; the details are in its log. */
  'internal',
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export function isErrorCode(s: unknown): s is ErrorCode {
  return typeof s === 'string' && (ERROR_CODES as readonly string[]).includes(s);
}
