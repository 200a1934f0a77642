import { createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../spec/validation-error.js';
import type { Idempotency } from '../store/store.js';
import type { Principal } from './auth/principal.js';

/**
 * The `Idempotency-Key` of a submit, if it has one (the IETF draft's header, as Stripe and others
 * use it): the same key with the same request returns what the first one made instead of making it
 * again; with a different request it is refused (409). The request is identified by its route and
 * a digest of its body as sent, so a client's retry of the same bytes matches. The key is the
 * caller's own (idempotencyScope): another team's use of the same key is another key.
 */
export function idempotencyOf(req: FastifyRequest, body: string): Idempotency | undefined {
  const header = req.headers['idempotency-key'];
  if (header === undefined) return undefined;
  const key = Array.isArray(header) ? header[0]! : header;
  if (!/^[\x21-\x7e]{1,200}$/.test(key)) {
    throw new ValidationError([{ path: 'header idempotency-key', message: '1 to 200 printable ASCII characters, no spaces' }]);
  }
  const requestHash = createHash('sha256').update(`${req.method} ${req.routeOptions.url}\n`).update(body).digest('base64url');
  return { scope: idempotencyScope(req.principal), key, requestHash };
}

/**
 * Whose keys these are: a team token's team (its tokens share its jobs, so a CI job retrying with
 * a rotated token still finds its submit), any other token its own id (an admin token sees every
 * team, so two admins' keys must not meet). Keys recorded before 0020 are in scopes no caller has,
 * or their jobs' team (0020-idempotency-scope.ts); `legacy:` is never made here.
 */
function idempotencyScope(p: Principal | undefined): string {
  // The submit routes need a token (access 'user'): a missing principal is a wiring error.
  if (!p) throw new Error('internal: an Idempotency-Key on a route without a token');
  return p.kind === 'team' && p.team !== null ? `team:${p.team}` : `token:${p.tokenId}`;
}
