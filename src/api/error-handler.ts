import type { FastifyError, FastifyInstance } from 'fastify';
import {
  ConflictError,
  ForbiddenError,
  HeartbeatShedError,
  NotFoundError,
  OutputLimitExceeded,
  RateLimitedError,
  StaleAttemptError,
  UnauthenticatedError,
  StoreBusyError,
  TooManyStreamsError,
} from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';
import { isErrorCode } from './contract/error-codes.js';
import type { ErrorBody } from './contract/job-view.js';

/**
 * The one place where errors become HTTP statuses. Anything not recognised is a 500 with a
 * generic message (the details go to the server log, not to the client).
 */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, req, reply) => {
    const send = (status: number, body: ErrorBody) => {
      req.failure = { error: body.error, message: body.message };
      return reply.status(status).send(body);
    };
    if (err instanceof ValidationError) {
      return send(400, { error: 'invalid_request', message: err.message, issues: err.issues });
    }
    if (err instanceof NotFoundError) return send(404, { error: 'not_found', message: err.message });
    if (err instanceof UnauthenticatedError) {
      void reply.header('www-authenticate', 'Bearer realm="gantry"');
      return send(401, { error: 'unauthenticated', message: err.message });
    }
    if (err instanceof ForbiddenError) return send(403, { error: 'forbidden', message: err.message });
    if (err instanceof RateLimitedError) {
      void reply.header('retry-after', String(err.retryAfterSeconds));
      return send(429, { error: 'rate_limited', message: err.message });
    }
    if (err instanceof HeartbeatShedError) {
      void reply.header('retry-after', String(err.retryAfterSeconds));
      return send(429, { error: 'heartbeat_shed', message: err.message });
    }
    if (err instanceof TooManyStreamsError) return send(429, { error: 'too_many_streams', message: err.message });
    if (err instanceof StaleAttemptError) {
      // Every refused report, whatever its route (start, logs, outputs, complete), says so in the log.
      req.log.warn({ attemptId: err.attemptId, route: req.routeOptions.url, reason: err.reason }, 'stale report refused');
      return send(409, { error: 'stale_attempt', message: err.message });
    }
    if (err instanceof ConflictError) return send(409, { error: 'conflict', message: err.message });
    if (err instanceof OutputLimitExceeded) {
      // The rest of the body is not read: the connection closes after the answer instead of taking it in.
      void reply.header('connection', 'close');
      return send(413, { error: 'outputs_too_large', message: err.message });
    }
    if (err instanceof StoreBusyError) {
      void reply.header('retry-after', '1');
      return send(503, { error: 'busy', message: err.message });
    }
    if (err.validation) {
      const issues = err.validation.map((v) => ({
        path: `${err.validationContext ?? 'body'}${v.instancePath ?? ''}`,
        message: v.message ?? 'invalid',
      }));
      return send(400, { error: 'invalid_request', message: issues.map((i) => `${i.path}: ${i.message}`).join('; '), issues });
    }
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      const limit = req.routeOptions.bodyLimit;
      const mib = limit !== undefined && limit % 2 ** 20 === 0 ? ` (${limit / 2 ** 20} MiB)` : '';
      return send(413, { error: 'body_too_large', message: `request body is over the limit of ${limit ?? 'the server'} bytes${mib}` });
    }
    if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      return send(415, {
        error: 'unsupported_media_type',
        message: `content-type ${req.headers['content-type'] ?? '(none)'} is not accepted here; send application/json (or application/yaml for a job spec)`,
      });
    }
    if (err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err instanceof SyntaxError) {
      return send(400, { error: 'invalid_json', message: `body is not valid JSON: ${err.message}` });
    }
    if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
      // Codes are a closed list (contract/error-codes.ts): a framework's own code (FST_ERR_…) is a bad request, its message kept.
      return send(err.statusCode, { error: isErrorCode(err.code) ? err.code : 'bad_request', message: err.message });
    }
    req.log.error({ err }, 'unhandled error');
    return send(500, { error: 'internal', message: 'internal server error; see the server log' });
  });
  app.setNotFoundHandler((req, reply) => {
    reply.status(404).send({ error: 'not_found', message: `no route ${req.method} ${req.url}` } satisfies ErrorBody);
  });
}
