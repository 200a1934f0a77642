import { MachineLifecycle } from '../../autoscale/machine-lifecycle.js';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import type { TxContext } from './tx-context.js';

/**
 * machineRegister's hook (issue 30): an agent registering with the name of a machine the
 * autoscaler started and still waits for (provisioning or joining) makes it ready, in the
 * registration's transaction, so the join is never seen without its machine row nor the other way
 * round. A name with no row, or a failed row, registers as an ordinary machine. A released row's
 * machine is being stopped by its provider: its agent registering (again, told by a heartbeat that
 * the removed machine is unknown, or late, after a failed boot) is kept draining, so no work is
 * placed on a machine about to be stopped; autoscaleStopped removes it.
 * Kept apart from autoscale-verbs.ts, which imports the machine verbs this is called from.
 */
export async function autoscaleJoined(tx: TxContext, p: { name: string; machineId: string }): Promise<{ machineChanged: boolean }> {
  const row = await tx.db.selectFrom('autoscaled_machines').select(['pool', 'lifecycle', 'started_at']).where('name', '=', p.name).executeTakeFirst();
  if (row?.lifecycle === MachineLifecycle.released) return { machineChanged: await keepOutOfService(tx, { ...p, pool: row.pool }) };
  const unchanged = { machineChanged: false };
  if (!row || (row.lifecycle !== MachineLifecycle.provisioning && row.lifecycle !== MachineLifecycle.joining)) return unchanged;
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ lifecycle: MachineLifecycle.ready, joined_at: tx.now, machine_id: p.machineId, updated_at: tx.now })
    .where('name', '=', p.name)
    .where('lifecycle', '=', row.lifecycle)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged;
  await tx.event({
    type: 'autoscale:joined',
    machineId: p.machineId,
    message: `machine ${p.name} joined pool ${row.pool} after ${Math.round((tx.now - Number(row.started_at)) / 1000)} s`,
    data: { pool: row.pool, name: p.name, from: row.lifecycle, to: MachineLifecycle.ready, bootMs: tx.now - Number(row.started_at) },
  });
  return unchanged;
}

/** eligible → draining (the operator's drain's write and event), as the registration just made it eligible; whether it wrote. */
async function keepOutOfService(tx: TxContext, p: { name: string; machineId: string; pool: string }): Promise<boolean> {
  const res = await tx.db
    .updateTable('machines')
    .set({ scheduling: MachineScheduling.draining, updated_at: tx.now })
    .where('id', '=', p.machineId)
    .where('scheduling', '=', MachineScheduling.eligible)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return false;
  await tx.event({
    type: 'machine:draining',
    machineId: p.machineId,
    message: `machine ${p.name} draining: released by the autoscaler (pool ${p.pool}), its provider is stopping it; no new work is placed there (was eligible)`,
    data: { from: MachineScheduling.eligible, to: MachineScheduling.draining },
  });
  return true;
}
