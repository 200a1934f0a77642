/**
 * Errors that cross the API boundary. Each carries the fields a client needs; the API maps each
 * class to one HTTP status in one place (src/api/error-handler.ts). A spec or request that is wrong
 * is a ValidationError, which is the spec language's (src/spec/validation-error.ts): the CLI throws
 * it too.
 */
export class NotFoundError extends Error {
  /** `why`: the whole message, when "<what> <id> not found" would not say it well. */
  constructor(
    readonly what: string,
    readonly id: string,
    why?: string,
  ) {
    super(why ?? `${what} ${id} not found`);
    this.name = 'NotFoundError';
  }
}

/** A report from an agent about an attempt that is no longer current (stale fencing token, or the
 *  attempt already ended). The agent must stop the process. */
export class StaleAttemptError extends Error {
  constructor(
    readonly attemptId: string,
    readonly reason: string,
  ) {
    super(`attempt ${attemptId} is not current: ${reason}`);
    this.name = 'StaleAttemptError';
  }
}

/** A request that conflicts with the current state (cancel a finished job, for example). */
export class ConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConflictError';
  }
}

/**
 * A submit whose Idempotency-Key was seen before with the same request: it was done then, and these
 * are its jobs. Not a failure: the API answers 200 with them (a retried submit makes no second job).
 */
export class AlreadySubmitted extends Error {
  constructor(
    readonly key: string,
    readonly jobIds: readonly string[],
  ) {
    super(`Idempotency-Key ${key} was already used for this request`);
    this.name = 'AlreadySubmitted';
  }
}

/** No credential, or one that is not (or no longer) valid: who is asking is unknown. */
export class UnauthenticatedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnauthenticatedError';
  }
}

/** A known caller asking for what its token does not allow. (Another team's job is not this: it is not found.) */
export class ForbiddenError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ForbiddenError';
  }
}

/** Too many requests from one token; `retryAfterSeconds` says when to come back. */
export class RateLimitedError extends Error {
  constructor(
    readonly retryAfterSeconds: number,
    message: string,
  ) {
    super(message);
    this.name = 'RateLimitedError';
  }
}

/**
 * An idle heartbeat shed by a server past its heartbeat budget (api/heartbeat-shedding.ts): its
 * arrival was recorded as a sign of life; the agent comes back after `retryAfterSeconds`.
 */
export class HeartbeatShedError extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super(`the server is past its heartbeat budget: heartbeat again after ${retryAfterSeconds} s (your arrival was recorded)`);
    this.name = 'HeartbeatShedError';
  }
}

/** A token holding as many streams open as it may (api/stream-slots.ts): the next is refused until one closes. */
export class TooManyStreamsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TooManyStreamsError';
  }
}

/**
 * The database kept refusing a transaction because concurrent ones touched the same rows
 * (PostgreSQL's serialization failures and deadlocks), and the store stopped retrying it.
 * Nothing of it was written; the request may be sent again.
 */
export class StoreBusyError extends Error {
  constructor(
    readonly tries: number,
    override readonly cause: unknown,
  ) {
    super(`the database is busy: a transaction conflicted with concurrent ones ${tries} times in a row; nothing was written, try again`);
    this.name = 'StoreBusyError';
  }
}

/** A leader-only write by a replica that is no longer the leader (or whose lease ran out): nothing was written. */
export class NotLeaderError extends Error {
  constructor(
    readonly holder: string,
    readonly term: number,
  ) {
    super(`${holder} is not the leader for term ${term} any more; its write was refused`);
    this.name = 'NotLeaderError';
  }
}

/** An output upload over what the stage's or the team's output limits leave (domain/output-limits.ts): a 413, nothing of it kept. */
export class OutputLimitExceeded extends Error {
  constructor(
    readonly limit: 'stage-bytes' | 'stage-files' | 'team-bytes',
    message: string,
  ) {
    super(message);
    this.name = 'OutputLimitExceeded';
  }
}
