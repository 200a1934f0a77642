import { MachineLifecycle } from '../../autoscale/machine-lifecycle.js';
import type { TxContext } from './tx-context.js';

/**
 * machineRegister's hook (issue 30): an agent registering with the name of a machine the
 * autoscaler started and still waits for (provisioning or joining) makes it ready, in the
 * registration's transaction, so the join is never seen without its machine row nor the other way
 * round. Any other name (no row, or one released or failed) registers as an ordinary machine.
 * Kept apart from autoscale-verbs.ts, which imports the machine verbs this is called from.
 */
export async function autoscaleJoined(tx: TxContext, p: { name: string; machineId: string }): Promise<void> {
  const row = await tx.db
    .selectFrom('autoscaled_machines')
    .select(['pool', 'lifecycle', 'started_at'])
    .where('name', '=', p.name)
    .where('lifecycle', 'in', [MachineLifecycle.provisioning, MachineLifecycle.joining])
    .executeTakeFirst();
  if (!row) return;
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ lifecycle: MachineLifecycle.ready, joined_at: tx.now, machine_id: p.machineId, updated_at: tx.now })
    .where('name', '=', p.name)
    .where('lifecycle', '=', row.lifecycle)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return;
  await tx.event({
    type: 'autoscale:joined',
    machineId: p.machineId,
    message: `machine ${p.name} joined pool ${row.pool} after ${Math.round((tx.now - Number(row.started_at)) / 1000)} s`,
    data: { pool: row.pool, name: p.name, from: row.lifecycle, to: MachineLifecycle.ready, bootMs: tx.now - Number(row.started_at) },
  });
}
