import type { GantryClient } from '../client/gantry-client.js';

/**
 * Why a `--team` or `--pool` filter names nothing the server knows, or null when both are known.
 * The server filters by exact name and sends nothing for an unknown one, so a typo would wait
 * silently for ever (`events --follow`) or read as "no jobs": asked first, it fails with the names
 * that would work.
 */
export async function unknownFilter(client: Pick<GantryClient, 'teams' | 'pools'>, filters: { team?: string; pool?: string }): Promise<string | null> {
  const [teams, pools] = await Promise.all([filters.team !== undefined ? client.teams() : null, filters.pool !== undefined ? client.pools() : null]);
  if (teams && !teams.some((t) => t.name === filters.team)) {
    return `no team "${filters.team}" on this server; teams: ${teams.map((t) => t.name).join(', ') || 'none yet'}`;
  }
  if (pools && !pools.pools.some((p) => p.pool === filters.pool)) {
    const known = pools.pools.map((p) => p.pool).join(', ') || 'none yet';
    return `no pool "${filters.pool}" on this server; pools (of the machines and of the queued stages): ${known}`;
  }
  return null;
}
