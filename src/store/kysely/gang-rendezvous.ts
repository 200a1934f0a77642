import { createHash } from 'node:crypto';
import type { GangRendezvous } from '../records.js';
import type { AttemptsTable, MachinesTable } from '../schema.js';
import { prepared, preparedList } from './prepared-query.js';
import type { Db } from './tx-context.js';

/**
 * Where a gang's members meet (issue 31, docs/gangs.md "Rendezvous"): rank 0's machine's address,
 * at a port the server reserved for the gang on that machine when it placed it, from the range the
 * machine's agent registered (`--gang-ports`). "Reserved" is from Gantry's side: no two gangs whose
 * rank 0 holds room on one machine share a port; a process outside Gantry may still hold one.
 */

/** The range a machine whose agent registered none keeps for gangs (an agent from before `--gang-ports`): that agent's flag's default. */
export const DEFAULT_GANG_PORTS = { first: 29500, last: 29599 } as const;

/** A gang row from before migration 0027 has no port: it keeps the one its version derived from the gang. */
function legacyMasterPort(gangId: string): number {
  return 29500 + (createHash('sha256').update(gangId).digest().readUInt32BE(0) % 500);
}

/** What the agent registered, from the machine's `agent` column (JSON; an agent may have sent anything there). */
function agentOf(m: Pick<MachinesTable, 'agent'>): Record<string, unknown> {
  try {
    const a = JSON.parse(m.agent) as unknown;
    return typeof a === 'object' && a !== null ? (a as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** A machine's address for others to reach it: what its agent advertised (`--advertise-addr`), else its host, else the machine's name. */
export function machineAddress(m: Pick<MachinesTable, 'agent' | 'name'>): string {
  const a = agentOf(m);
  for (const v of [a.advertiseAddr, a.host]) if (typeof v === 'string' && v.length > 0) return v;
  return m.name;
}

/** The ports a machine's agent keeps for gangs (`agent.gangPorts`), else the default range; a malformed range is the default too (the route refuses one). */
export function machineGangPorts(m: Pick<MachinesTable, 'agent'>): { first: number; last: number } {
  const r = agentOf(m).gangPorts as { first?: unknown; last?: unknown } | undefined;
  if (r && Number.isInteger(r.first) && Number.isInteger(r.last) && (r.first as number) <= (r.last as number))
    return { first: r.first as number, last: r.last as number };
  return DEFAULT_GANG_PORTS;
}

/** Ports held on a machine by gangs whose rank 0 still holds room there (not released: a killed rank 0 not yet gone keeps its port). */
const portsHeld = prepared<[machineId: string]>()((db, [machineId]) =>
  db
    .selectFrom('attempts')
    .select('gang_master_port')
    .where('machine_id', '=', machineId)
    .where('released_at', 'is', null)
    .where('gang_rank', '=', 0)
    .where('gang_master_port', 'is not', null),
);

/**
 * The lowest port of rank 0's machine's range that no gang there holds, nor one placed earlier in
 * this plan (`takenNow`, by machine id, updated here); null when the range is full. Lowest rather
 * than spread: a retry reuses its predecessor's port only once that attempt was released, i.e.
 * its agent saw its process gone.
 */
export async function reserveGangPort(
  db: Db,
  machine: Pick<MachinesTable, 'id' | 'agent'>,
  takenNow: Map<string, Set<number>>,
): Promise<{ port: number } | { full: { first: number; last: number } }> {
  const range = machineGangPorts(machine);
  const taken = takenNow.get(machine.id) ?? new Set<number>();
  for (const r of await portsHeld.rows(db, machine.id)) taken.add(Number(r.gang_master_port));
  for (let port = range.first; port <= range.last; port++) {
    if (taken.has(port)) continue;
    taken.add(port);
    takenNow.set(machine.id, taken);
    return { port };
  }
  return { full: range };
}

/** Rank 0's attempts with their machine: its name and what its agent registered (its address). */
const mastersOf = preparedList((db, ids) =>
  db
    .selectFrom('attempts')
    .innerJoin('machines', 'machines.id', 'attempts.machine_id')
    .select(['attempts.id as id', 'machines.name as name', 'machines.agent as agent'])
    .where('attempts.id', 'in', ids),
);

/** Each gang member's rendezvous, by its attempt id (one read for all the gangs of the rows); nothing for other attempts. */
export async function gangRendezvous(
  db: Db,
  rows: readonly Pick<AttemptsTable, 'id' | 'gang_id' | 'gang_rank' | 'gang_size' | 'gang_master_port'>[],
): Promise<Map<string, GangRendezvous>> {
  const out = new Map<string, GangRendezvous>();
  const gangIds = [...new Set(rows.flatMap((r) => (r.gang_id === null ? [] : [r.gang_id])))];
  if (gangIds.length === 0) return out;
  const masters = new Map((await mastersOf.rows(db, gangIds)).map((m) => [m.id, machineAddress(m)]));
  for (const r of rows) {
    if (r.gang_id === null) continue;
    const addr = masters.get(r.gang_id);
    if (addr === undefined) continue;
    const masterPort = r.gang_master_port === null ? legacyMasterPort(r.gang_id) : Number(r.gang_master_port);
    out.set(r.id, { rank: Number(r.gang_rank), size: Number(r.gang_size), masterAddr: addr, masterPort });
  }
  return out;
}
