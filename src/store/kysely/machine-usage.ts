import type { GpuHeld, MachineRecord } from '../records.js';
import { prepared, preparedList } from './prepared-query.js';
import type { Db, Trx } from './tx-context.js';

export type Usage = MachineRecord['allocated'];

/**
 * What attempts hold on each machine: every attempt whose process may still be alive, that is,
 * not yet released. An attempt the server ended (canceled, lost) keeps its CPUs, memory and GPU
 * devices until its agent stops reporting it, so a new attempt never shares a device with a
 * process still in its kill grace. Computed from the attempts table rather than kept in
 * counters, so it can never drift from the attempts that hold the resources. A GPU held by
 * shares (issue 29) is held for the sum of their thousandths and of their GPU memory.
 */
export async function machineUsage(db: Db | Trx, machineIds?: string[]): Promise<Map<string, Usage>> {
  return usageOf(machineIds ? await heldOnMachines.rows(db, machineIds) : await heldEverywhere.rows(db));
}

/** A held attempt's row as the usage reads it. */
export type HeldRow = Awaited<ReturnType<typeof heldEverywhere.rows>>[number];

/** What the attempts of these rows hold, by machine (machineUsage's sum; pass-reads.ts hands rows read with others). */
export function usageOf(rows: readonly HeldRow[]): Map<string, Usage> {
  const out = new Map<string, Usage>();
  const perGpu = new Map<string, Map<number, GpuHeld>>();
  for (const r of rows) {
    const u = out.get(r.machine_id) ?? emptyUsage();
    u.cpuMillis += Number(r.cpu_millis);
    u.memoryBytes += Number(r.memory_bytes);
    u.attempts += 1;
    out.set(r.machine_id, u);
    const gpus = perGpu.get(r.machine_id) ?? new Map<number, GpuHeld>();
    perGpu.set(r.machine_id, gpus);
    for (const index of JSON.parse(r.gpu_indices) as number[]) {
      const g = gpus.get(index) ?? { index, milli: 0, memoryBytes: 0 };
      g.milli += Number(r.gpu_milli);
      // A share holds its GPU memory apart; a whole GPU's bound is a requirement, not a hold.
      if (Number(r.gpu_milli) < 1000 && r.gpu_memory_bytes !== null) g.memoryBytes += Number(r.gpu_memory_bytes);
      gpus.set(index, g);
    }
  }
  for (const [machineId, u] of out) {
    u.gpuHeld = [...(perGpu.get(machineId)?.values() ?? [])].sort((a, b) => a.index - b.index);
    u.gpuIndices = u.gpuHeld.map((g) => g.index);
  }
  return out;
}

const held = (db: Db) =>
  db
    .selectFrom('attempts')
    .select(['machine_id', 'cpu_millis', 'memory_bytes', 'gpu_indices', 'gpu_milli', 'gpu_memory_bytes'])
    .where('released_at', 'is', null);
export const heldEverywhere = prepared<[]>()((db) => held(db));
const heldOnMachines = preparedList((db, ids) => held(db).where('machine_id', 'in', ids));

export const emptyUsage = (): Usage => ({ cpuMillis: 0, memoryBytes: 0, gpuIndices: [], attempts: 0, gpuHeld: [] });
