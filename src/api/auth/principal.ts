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
  }
  interface FastifyContextConfig {
    access?: Access;
  }
}

/** The team whose jobs a principal may see: null for every team (admin). */
export function teamScope(p: Principal | undefined): string | null {
  return p?.kind === 'team' ? p.team : null;
}
