import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { AuditEntry } from '../../store/records.js';
import type { Store } from '../../store/store.js';
import type { Principal } from './principal.js';
import { routeParam } from './route-param.js';

/** Who, in words, for the audit log. */
export function actorOf(p: Principal | undefined): string {
  if (!p) return 'nobody (no valid token)';
  const who = p.kind === 'team' ? `team ${p.team}` : p.kind === 'machine' ? `machine ${p.machineId}` : p.kind;
  return `${who} token ${p.tokenId} (${p.name})`;
}

/** The audit entry of the change a request asks for: passed to the store verb, which writes it with the change. */
export function auditBy(req: FastifyRequest, action: string, target: string | null = null): AuditEntry {
  return { tokenId: req.principal?.tokenId ?? null, actor: actorOf(req.principal), action, target };
}

/**
 * The same refusal repeated within this long is one audit row with a count (issue 28: 600 × 403
 * in half a second wrote 606 rows); the rate limiter bounds how fast it can repeat at all.
 */
export const AUDIT_FOLD_MS = 60_000;

/**
 * A request to a route that changes something (`config.audit`, its action) that was refused or
 * failed changed nothing: its audit row is written on its own, with the answer's status and error,
 * folded into the row of the same refusal within AUDIT_FOLD_MS. (A change that was made wrote its
 * row in its own transaction: auditBy.)
 */
export function installAuditOfRefusals(app: FastifyInstance, store: Store, now: () => number): void {
  // Every change a person can ask for is audited: a route for people that changes something and
  // names no action is refused when it is registered. (The agents' protocol, heartbeats and reports
  // hundreds of times a second, is recorded as events instead.)
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    const forPeople = route.config?.access === 'user' || route.config?.access === 'admin' || route.config?.access === 'join';
    if (forPeople && methods.some((m) => m !== 'GET' && m !== 'HEAD') && !route.config?.audit) {
      throw new Error(`route ${methods.join(',')} ${route.url} changes something and names no audit action (config.audit)`);
    }
  });
  app.addHook('onResponse', async (req, reply) => {
    const action = req.routeOptions.config?.audit;
    // Nobody to name without a valid token (401): those go to the log (authenticate.ts), not to the audit.
    if (!action || reply.statusCode < 400 || !req.principal) return;
    const target = routeParam(req.params, 'id') ?? routeParam(req.params, 'machine') ?? null;
    const f = req.failure;
    const result = `refused: ${reply.statusCode}${f ? ` ${f.error}: ${f.message}` : ''}`.slice(0, 2000);
    try {
      await store.auditRecord({
        tokenId: req.principal.tokenId,
        actor: actorOf(req.principal),
        action,
        target,
        result,
        now: now(),
        foldWithinMs: AUDIT_FOLD_MS,
      });
    } catch (err) {
      req.log.error({ err, action }, 'cannot write the audit row of a refused request');
    }
  });
}
