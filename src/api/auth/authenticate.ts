import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ForbiddenError, RateLimitedError, UnauthenticatedError } from '../../domain/errors.js';
import type { RateLimiter } from './rate-limiter.js';
import type { Access, Principal } from './principal.js';
import type { TokenCache } from './token-cache.js';
import { tokenHash } from './token-secret.js';
import { routeParam } from './route-param.js';

const HOW = 'send one as "Authorization: Bearer <token>" (the CLI: --token, $GANTRY_TOKEN, or the admin.token file in $GANTRY_DATA_DIR, default ./.gantry)';

/**
 * Every request but an `open` route's must carry a token, and the token must allow what the
 * route is for (principal.ts). Every route declares its access: one that does not is refused when
 * it is registered, so a new route cannot be left open by forgetting.
 */
export function installAuthentication(app: FastifyInstance, deps: { cache: TokenCache; now: () => number; limiter?: RateLimiter }): void {
  app.addHook('onRoute', (route) => {
    if (!route.config?.access) throw new Error(`route ${String(route.method)} ${route.url} declares no access (config.access)`);
  });
  app.addHook('onRequest', async (req) => {
    const access = req.routeOptions.config?.access;
    // No route (a 404) or an open one: nothing to check.
    if (access === undefined || access === 'open') return;
    // Refused requests count too (issue 28: 600 × 403 in half a second were all answered, and
    // audited): a 401 against the token when it is known (revoked, expired), else against the
    // address it came from; a 403 against its token. Past the limit, 429 instead.
    const limit = (key: string, kind: string) => {
      const wait = deps.limiter?.take(key, kind, deps.now());
      if (wait != null)
        throw new RateLimitedError(wait, `too many requests ${key.startsWith('addr:') ? `from ${req.ip}` : `with token ${key}`}: try again in ${wait} s`);
    };
    const unauthenticated = (why: string, tokenId: string | null, kind: string) => {
      limit(tokenId ?? `addr:${req.ip}`, kind);
      // Nobody to name in the audit (it names who asked): said in the server's log (docs/security.md).
      req.log.warn({ ip: req.ip, method: req.method, route: req.routeOptions.url, tokenId }, `request refused (401): ${why}`);
      return new UnauthenticatedError(why);
    };
    const token = bearer(req.headers.authorization);
    if (token === null) throw unauthenticated(`this request needs a token: ${HOW}`, null, 'anonymous');
    const rec = await deps.cache.get(tokenHash(token));
    if (!rec) throw unauthenticated('the token is not known to this server', null, 'anonymous');
    if (rec.revokedAt !== null) throw unauthenticated(`token ${rec.id} (${rec.name}) was revoked`, rec.id, rec.kind);
    if (rec.expiresAt !== null && rec.expiresAt <= deps.now())
      throw unauthenticated(`token ${rec.id} (${rec.name}) expired at ${new Date(rec.expiresAt).toISOString()}`, rec.id, rec.kind);
    const principal: Principal = { tokenId: rec.id, kind: rec.kind, team: rec.team, machineId: rec.machineId, name: rec.name };
    // Known, even when refused below: the audit names who was refused.
    req.principal = principal;
    limit(principal.tokenId, principal.kind);
    const refusal = refuse(access, principal, req);
    if (refusal) {
      if (principal.kind === 'machine')
        req.log.warn({ tokenId: principal.tokenId, machineId: principal.machineId, url: req.url }, `machine credential refused: ${refusal}`);
      throw new ForbiddenError(refusal);
    }
  });
}

function bearer(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return m ? m[1]! : null;
}

/** Why this principal may not use this route, or null when it may. */
function refuse(access: Access, p: Principal, req: FastifyRequest): string | null {
  switch (access) {
    case 'admin':
      return p.kind === 'admin' ? null : `this needs an admin token; ${describe(p)} is not one`;
    case 'user':
      return p.kind === 'admin' || p.kind === 'team' ? null : `this needs a team or admin token; ${describe(p)} is for agents`;
    case 'join':
      return p.kind === 'join' || p.kind === 'admin' || p.kind === 'machine' ? null : `registering a machine needs a join token; ${describe(p)} is not one`;
    case 'machine': {
      if (p.kind !== 'machine') return `this is for agents, with their machine's credential; ${describe(p)} is not one`;
      // A machine speaks only for itself.
      const id = routeParam(req.params, 'id');
      if (req.routeOptions.url?.startsWith('/v1/agent/machines/') && id !== p.machineId)
        return `the credential of machine ${p.machineId} cannot speak for machine ${id}`;
      return null;
    }
    default:
      return null;
  }
}

function describe(p: Principal): string {
  return `${p.kind} token ${p.tokenId}${p.team ? ` (team ${p.team})` : ''}`;
}
