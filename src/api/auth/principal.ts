import type { TokenKind } from '../../domain/token-kind.js';

/** Who is asking: the token a request came with. */
export interface Principal {
  tokenId: string;
  kind: TokenKind;
  /** A team token's team; null for the others. */
  team: string | null;
  /** A machine credential's machine; null for the others. */
  machineId: string | null;
  name: string;
}

/**
 * What a route needs, declared on every route (`config: { access }`):
 * - `open`: nothing (the health check);
 * - `user`: an admin or a team token (a team token then sees its own team's jobs only);
 * - `admin`: an admin token;
 * - `join`: a join token, an admin token, or a machine credential (an agent registering, again);
 * - `machine`: a machine credential; on `/v1/agent/machines/:id/…`, that machine's own.
 */
export type Access = 'open' | 'user' | 'admin' | 'join' | 'machine';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the authentication hook on every route that is not `open`. */
    principal?: Principal;
    /** The error answered, when one was (error-handler.ts): for the audit row of a refusal. */
    failure?: { error: string; message: string };
  }
  interface FastifyContextConfig {
    access?: Access;
    /** A route that changes something: its action's name in the audit log (docs/security.md). */
    audit?: string;
  }
}

/** The team whose jobs a principal may see: null for every team (admin). */
export function teamScope(p: Principal | undefined): string | null {
  return p?.kind === 'team' ? p.team : null;
}

/** A principal in words, for reasons people read ("canceled by team ml token tok_…"). */
export function who(p: Principal | undefined): string {
  return p ? `${p.kind === 'team' ? `team ${p.team}` : p.kind} token ${p.tokenId}` : 'user';
}
