import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../spec/validation-error.js';
import type { Idempotency } from '../store/store.js';

/**
 * The `Idempotency-Key` of a submit, if it has one (the IETF draft's header, as Stripe and others
 * use it): the same key with the same request returns what the first one made instead of making it
 * again; with a different request it is refused (409). The request is identified by its route and
 * a digest of its body as sent, so a client's retry of the same bytes matches.
 */
export function idempotencyOf(req: FastifyRequest, body: string): Idempotency | undefined {
  const header = req.headers['idempotency-key'];
  if (header === undefined) return undefined;
  const key = Array.isArray(header) ? header[0]! : header;
  if (!/^[\x21-\x7e]{1,200}$/.test(key)) {
    throw new ValidationError([{ path: 'header idempotency-key', message: '1 to 200 printable ASCII characters, no spaces' }]);
  }
  const requestHash = createHash('sha256').update(`${req.method} ${req.routeOptions.url}\n`).update(body).digest('base64url');
  return { key, requestHash };
}
