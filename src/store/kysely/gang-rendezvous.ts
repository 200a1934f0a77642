import { createHash } from 'node:crypto';
import type { GangRendezvous } from '../records.js';
import type { AttemptsTable } from '../schema.js';
import { preparedList } from './prepared-query.js';
import type { Db } from './tx-context.js';

/**
 * Where a gang's members meet (issue 31, docs/gangs.md "Rendezvous"): rank 0's machine, at a port
 * derived from the gang. The port comes from a fixed range and is NOT reserved: nothing stops
 * another process on rank 0's machine from holding it (a later session has rank 0's agent pick and
 * report a free one). Derived from rank 0's attempt id, so every member computes the same port
 * without talking to the others, and a retry (a new id) most likely gets another one.
 */
export const GANG_PORT_FIRST = 29500;
export const GANG_PORT_COUNT = 500;

export function gangMasterPort(gangId: string): number {
  return GANG_PORT_FIRST + (createHash('sha256').update(gangId).digest().readUInt32BE(0) % GANG_PORT_COUNT);
}

/** Rank 0's attempts with their machine: its name and what its agent registered (its host's name). */
const mastersOf = preparedList((db, ids) =>
  db
    .selectFrom('attempts')
    .innerJoin('machines', 'machines.id', 'attempts.machine_id')
    .select(['attempts.id as id', 'machines.name as name', 'machines.agent as agent'])
    .where('attempts.id', 'in', ids),
);

/** rank 0's address: the host its agent said it runs on (`agent.host`), else the machine's name. */
function masterAddr(m: { name: string; agent: string }): string {
  const agent = JSON.parse(m.agent) as { host?: unknown };
  return typeof agent.host === 'string' && agent.host.length > 0 ? agent.host : m.name;
}

/** Each gang member's rendezvous, by its attempt id (one read for all the gangs of the rows); nothing for other attempts. */
export async function gangRendezvous(
  db: Db,
  rows: readonly Pick<AttemptsTable, 'id' | 'gang_id' | 'gang_rank' | 'gang_size'>[],
): Promise<Map<string, GangRendezvous>> {
  const out = new Map<string, GangRendezvous>();
  const gangIds = [...new Set(rows.flatMap((r) => (r.gang_id === null ? [] : [r.gang_id])))];
  if (gangIds.length === 0) return out;
  const masters = new Map((await mastersOf.rows(db, gangIds)).map((m) => [m.id, masterAddr(m)]));
  for (const r of rows) {
    if (r.gang_id === null) continue;
    const addr = masters.get(r.gang_id);
    if (addr === undefined) continue;
    out.set(r.id, { rank: Number(r.gang_rank), size: Number(r.gang_size), masterAddr: addr, masterPort: gangMasterPort(r.gang_id) });
  }
  return out;
}
