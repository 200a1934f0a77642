import type { MachineRecord } from '../records.js';
import { prepared, preparedList } from './prepared-query.js';
import type { Db, Trx } from './tx-context.js';

export type Usage = MachineRecord['allocated'];

/**
 * What attempts hold on each machine: every attempt whose process may still be alive, that is,
 * not yet released. An attempt the server ended (canceled, lost) keeps its CPUs, memory and GPU
 * devices until its agent stops reporting it, so a new attempt never shares a device with a
 * process still in its kill grace. Computed from the attempts table rather than kept in
 * counters, so it can never drift from the attempts that hold the resources.
 */
export async function machineUsage(db: Db | Trx, machineIds?: string[]): Promise<Map<string, Usage>> {
  const rows = machineIds ? await heldOnMachines.rows(db, machineIds) : await heldEverywhere.rows(db);
  const out = new Map<string, Usage>();
  for (const r of rows) {
    const u = out.get(r.machine_id) ?? { cpuMillis: 0, memoryBytes: 0, gpuIndices: [], attempts: 0 };
    u.cpuMillis += Number(r.cpu_millis);
    u.memoryBytes += Number(r.memory_bytes);
    u.gpuIndices.push(...(JSON.parse(r.gpu_indices) as number[]));
    u.attempts += 1;
    out.set(r.machine_id, u);
  }
  for (const u of out.values()) u.gpuIndices.sort((a, b) => a - b);
  return out;
}

const held = (db: Db) => db.selectFrom('attempts').select(['machine_id', 'cpu_millis', 'memory_bytes', 'gpu_indices']).where('released_at', 'is', null);
const heldEverywhere = prepared<[]>()((db) => held(db));
const heldOnMachines = preparedList((db, ids) => held(db).where('machine_id', 'in', ids));

export const emptyUsage = (): Usage => ({ cpuMillis: 0, memoryBytes: 0, gpuIndices: [], attempts: 0 });
