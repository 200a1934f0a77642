import type { AutoscaleChange, AutoscaleRow, AutoscaleWait } from '../../autoscale/autoscale-row.js';
import { MachineLifecycle, machineLifecycleTransitions } from '../../autoscale/machine-lifecycle.js';
import { NotFoundError } from '../../domain/errors.js';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import { canTransition } from '../../domain/transition-table.js';
import type { AutoscaledMachinesTable } from '../schema.js';
import { autoscaleRowOf, withAttempts } from './autoscale-rows.js';
import { machineDrain, machineUncordon } from './machine-scheduling-verbs.js';
import type { TxContext } from './tx-context.js';

/**
 * The autoscaler's writes (issue 30, docs/autoscaling.md "The store"). Each lifecycle move is one
 * guarded write (`… WHERE name = ? AND lifecycle = ?`) that machine-lifecycle.ts's table must
 * allow, with its `autoscale:<verb>` event whose message is the decision's reason; a row no longer
 * in the state the caller's decision saw changes nothing and answers `changed: false`.
 */

type Columns = Partial<Omit<AutoscaledMachinesTable, 'name' | 'pool' | 'lifecycle'>>;

async function rowOrThrow(tx: TxContext, name: string): Promise<AutoscaledMachinesTable> {
  const row = await tx.db.selectFrom('autoscaled_machines').selectAll().where('name', '=', name).executeTakeFirst();
  if (!row) throw new NotFoundError('autoscaled machine', name);
  return row;
}

const unchanged = async (tx: TxContext, name: string): Promise<AutoscaleChange> => ({ row: (await autoscaleRowOf(tx.db, name))!, changed: false });

/** "machine h100-2 idle 300 s: …" from a reason that starts with the name, else "machine h100-2: <reason>". */
function says(name: string, reason: string): string {
  return reason.startsWith(`${name} `) ? `machine ${reason}` : `machine ${name}: ${reason}`;
}

/** The machine row an event names, where one exists (a row before its agent registered has none). */
async function machineIdOf(tx: TxContext, row: AutoscaledMachinesTable): Promise<string | null> {
  if (row.machine_id) return row.machine_id;
  const m = await tx.db.selectFrom('machines').select('id').where('name', '=', row.name).executeTakeFirst();
  return m?.id ?? null;
}

/**
 * Moves the row from one of `from` to `to` when the table allows it, guarded on the lifecycle
 * read; `then` runs in the same transaction after the write (the machine's scheduling).
 */
async function move(
  tx: TxContext,
  name: string,
  v: { from: readonly MachineLifecycle[]; to: MachineLifecycle; type: string; reason: string; set?: Columns; data?: Record<string, unknown> },
  then?: (row: AutoscaledMachinesTable) => Promise<void>,
): Promise<AutoscaleChange> {
  const row = await rowOrThrow(tx, name);
  const from = row.lifecycle;
  if (!v.from.includes(from) || !canTransition(machineLifecycleTransitions, from, v.to)) return unchanged(tx, name);
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ ...v.set, lifecycle: v.to, updated_at: tx.now })
    .where('name', '=', name)
    .where('lifecycle', '=', from)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged(tx, name);
  if (then) await then(row);
  await tx.event({
    type: v.type,
    machineId: await machineIdOf(tx, row),
    message: says(name, v.reason),
    data: { pool: row.pool, name, from, to: v.to, ...v.data },
  });
  return { row: (await autoscaleRowOf(tx.db, name))!, changed: true };
}

/** The next free names of a pool: `<pool>-<n>`, n past the highest the pool ever had, skipping names taken. */
async function nextNames(tx: TxContext, pool: string, count: number): Promise<string[]> {
  const prefix = `${pool}-`;
  const had = await tx.db.selectFrom('autoscaled_machines').select('name').where('pool', '=', pool).execute();
  let n = 0;
  for (const { name } of had) {
    const tail = name.slice(prefix.length);
    if (name.startsWith(prefix) && /^\d+$/.test(tail)) n = Math.max(n, Number(tail));
  }
  const names: string[] = [];
  while (names.length < count) {
    const name = `${prefix}${++n}`;
    // A machine an operator named so, or another pool's row ("a-1" of pool "a" is never "a-1" of
    // another pool, but a name is the provider's key and the agent's identity: never shared).
    const taken =
      (await tx.db.selectFrom('machines').select('id').where('name', '=', name).executeTakeFirst()) ??
      (await tx.db.selectFrom('autoscaled_machines').select('name').where('name', '=', name).executeTakeFirst());
    if (!taken) names.push(name);
  }
  return names;
}

export async function autoscaleStart(
  tx: TxContext,
  p: { pool: string; heldFor: readonly (readonly string[])[]; reason: string; now: number },
): Promise<AutoscaleRow[]> {
  if (p.heldFor.length === 0) return [];
  const names = await nextNames(tx, p.pool, p.heldFor.length);
  const rows: AutoscaledMachinesTable[] = names.map((name, i) => ({
    name,
    pool: p.pool,
    lifecycle: MachineLifecycle.provisioning,
    reason: p.reason,
    started_at: tx.now,
    requested_at: null,
    provider_id: null,
    joined_at: null,
    machine_id: null,
    draining_at: null,
    released_at: null,
    stopped_at: null,
    fail_reason: null,
    held_for: JSON.stringify([...new Set(p.heldFor[i])]),
    updated_at: tx.now,
  }));
  await tx.db.insertInto('autoscaled_machines').values(rows).execute();
  await tx.event({
    type: 'autoscale:start',
    message: `${p.reason} (${names.join(', ')})`,
    data: { pool: p.pool, names, from: null, to: MachineLifecycle.provisioning, heldFor: p.heldFor },
  });
  return withAttempts(tx.db, rows);
}

/**
 * The provider's answer, recorded once (`requestedAt` set: the loop asks no more). A row still
 * provisioning moves to joining; one whose agent registered first keeps its lifecycle.
 */
export async function autoscaleRequested(tx: TxContext, p: { name: string; providerId?: string | null; now: number }): Promise<AutoscaleChange> {
  const row = await rowOrThrow(tx, p.name);
  if (row.requested_at !== null) return unchanged(tx, p.name);
  const to = row.lifecycle === MachineLifecycle.provisioning ? MachineLifecycle.joining : row.lifecycle;
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ lifecycle: to, requested_at: tx.now, provider_id: p.providerId ?? null, updated_at: tx.now })
    .where('name', '=', p.name)
    .where('lifecycle', '=', row.lifecycle)
    .where('requested_at', 'is', null)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged(tx, p.name);
  await tx.event({
    type: 'autoscale:requested',
    machineId: await machineIdOf(tx, row),
    message: `machine ${p.name}: the provider started it${p.providerId ? ` as ${p.providerId}` : ''} after ${seconds(tx.now - Number(row.started_at))}`,
    data: { pool: row.pool, name: p.name, from: row.lifecycle, to, providerId: p.providerId ?? null },
  });
  return { row: (await autoscaleRowOf(tx.db, p.name))!, changed: true };
}

const seconds = (ms: number) => `${Math.round(ms / 1000)} s`;

/** States whose hold may grow: on its way in, or joined (its hold not yet placed). */
const HOLDING: readonly MachineLifecycle[] = [MachineLifecycle.provisioning, MachineLifecycle.joining, MachineLifecycle.ready];

export async function autoscaleHold(tx: TxContext, p: { name: string; stageIds: readonly string[]; now: number }): Promise<AutoscaleChange> {
  const row = await rowOrThrow(tx, p.name);
  const had = JSON.parse(row.held_for) as string[];
  const added = [...new Set(p.stageIds)].filter((s) => !had.includes(s));
  if (!HOLDING.includes(row.lifecycle) || added.length === 0) return unchanged(tx, p.name);
  // Guarded on the hold read too: two decisions adding at once must not lose one's stages.
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ held_for: JSON.stringify([...had, ...added]), updated_at: tx.now })
    .where('name', '=', p.name)
    .where('lifecycle', '=', row.lifecycle)
    .where('held_for', '=', row.held_for)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged(tx, p.name);
  await tx.event({
    type: 'autoscale:hold',
    machineId: await machineIdOf(tx, row),
    message: `machine ${p.name}: held for ${added.length} more waiting stage(s), ${had.length + added.length} in all`,
    data: { pool: row.pool, name: p.name, from: row.lifecycle, to: row.lifecycle, added },
  });
  return { row: (await autoscaleRowOf(tx.db, p.name))!, changed: true };
}

/**
 * Empties a hold. No event: the pass that gave the held stages their chance writes one per stage
 * it placed (`attempt:scheduled`, on this machine), and a stage it did not place simply waits.
 */
export async function autoscaleHoldClear(tx: TxContext, p: { name: string; now: number }): Promise<AutoscaleChange> {
  const row = await rowOrThrow(tx, p.name);
  if (row.held_for === '[]') return unchanged(tx, p.name);
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ held_for: '[]', updated_at: tx.now })
    .where('name', '=', p.name)
    .where('held_for', '=', row.held_for)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged(tx, p.name);
  return { row: (await autoscaleRowOf(tx.db, p.name))!, changed: true };
}

export function autoscaleDrain(tx: TxContext, p: { name: string; reason: string; now: number }): Promise<AutoscaleChange> {
  return move(
    tx,
    p.name,
    // A machine being released is held for nothing: its hold, if any was left, goes with the drain.
    { from: [MachineLifecycle.ready], to: MachineLifecycle.draining, type: 'autoscale:drain', reason: p.reason, set: { draining_at: tx.now, held_for: '[]' } },
    async (row) => {
      // The operator's drain, on the machine row: the scheduler's `not-eligible` and `gantry
      // machines` show it with no code of their own. A machine an operator removed has no row to cordon.
      if (row.machine_id) await machineDrain(tx, { machine: row.machine_id, stopRunning: false, jitter: 0 });
    },
  );
}

export function autoscaleKeep(tx: TxContext, p: { name: string; reason: string; now: number }): Promise<AutoscaleChange> {
  return move(
    tx,
    p.name,
    { from: [MachineLifecycle.draining], to: MachineLifecycle.ready, type: 'autoscale:keep', reason: p.reason, set: { draining_at: null } },
    async (row) => {
      if (row.machine_id) await machineUncordon(tx, { machine: row.machine_id });
    },
  );
}

/**
 * Released, and its machine row out of service, only with nothing holding room there: a refusal
 * (`changed: false`) is the "nothing is ever killed" rule, and the loop asks again when it is empty.
 * A failed row's agent may have registered after its boot timeout (an ordinary machine then, which
 * work may have reached): the same rule holds for it.
 */
export async function autoscaleRelease(tx: TxContext, p: { name: string; reason: string; now: number }): Promise<AutoscaleChange> {
  const row = await rowOrThrow(tx, p.name);
  const machine = await machineOfRow(tx, row);
  if (machine && (await holdsRoom(tx, machine.id))) return unchanged(tx, p.name);
  return move(
    tx,
    p.name,
    {
      from: [MachineLifecycle.draining, MachineLifecycle.failed],
      to: MachineLifecycle.released,
      type: 'autoscale:release',
      reason: p.reason,
      set: { released_at: tx.now, held_for: '[]' },
    },
    // machineRemove's write and event, without its refusal: the check above (in this
    // transaction) is the one that matters here, and the machine is the autoscaler's to forget.
    () => removeMachine(tx, machine, 'released by the autoscaler; the attempts that ran there keep its name'),
  );
}

export function autoscaleFail(tx: TxContext, p: { name: string; reason: string; now: number }): Promise<AutoscaleChange> {
  return move(tx, p.name, {
    from: [MachineLifecycle.provisioning, MachineLifecycle.joining],
    to: MachineLifecycle.failed,
    type: 'autoscale:fail',
    reason: p.reason,
    // Held for nothing: its stages are counted again at the next decision, onto another machine.
    set: { fail_reason: p.reason, held_for: '[]' },
  });
}

export async function autoscaleStopped(tx: TxContext, p: { name: string; now: number }): Promise<AutoscaleChange> {
  const row = await rowOrThrow(tx, p.name);
  if (row.lifecycle !== MachineLifecycle.released || row.stopped_at !== null) return unchanged(tx, p.name);
  const res = await tx.db
    .updateTable('autoscaled_machines')
    .set({ stopped_at: tx.now, updated_at: tx.now })
    .where('name', '=', p.name)
    .where('lifecycle', '=', MachineLifecycle.released)
    .where('stopped_at', 'is', null)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged(tx, p.name);
  await removeStopped(tx, row);
  await tx.event({
    type: 'autoscale:stopped',
    machineId: row.machine_id,
    message: `machine ${p.name}: the provider stopped it`,
    data: { pool: row.pool, name: p.name, from: row.lifecycle, to: row.lifecycle },
  });
  return { row: (await autoscaleRowOf(tx.db, p.name))!, changed: true };
}

/**
 * The machine row of a stopped machine leaves service again: its agent registered after the
 * release (autoscale-joined.ts kept it draining meanwhile). Left as it is while an attempt holds
 * room there (none can be placed on a draining machine; a lost one's is the reaper's).
 */
async function removeStopped(tx: TxContext, row: AutoscaledMachinesTable): Promise<void> {
  const machine = await machineOfRow(tx, row);
  if (!machine || machine.scheduling === MachineScheduling.removed || (await holdsRoom(tx, machine.id))) return;
  await removeMachine(tx, machine, 'stopped by its provider after the autoscaler released it');
}

/** The machine row a row's agent registered (by id once joined, else by name), if any. */
function machineOfRow(tx: TxContext, row: AutoscaledMachinesTable) {
  return tx.db
    .selectFrom('machines')
    .select(['id', 'name', 'scheduling', 'health'])
    .where((eb) => (row.machine_id ? eb('id', '=', row.machine_id) : eb('name', '=', row.name)))
    .executeTakeFirst();
}

/** Whether any attempt holds room on the machine (not yet released). */
async function holdsRoom(tx: TxContext, machineId: string): Promise<boolean> {
  const held = await tx.db
    .selectFrom('attempts')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('machine_id', '=', machineId)
    .where('released_at', 'is', null)
    .executeTakeFirstOrThrow();
  return Number(held.n) > 0;
}

/** The machine row out of service (`removed`), guarded on the scheduling read, with its event saying `why`. */
async function removeMachine(tx: TxContext, machine: Awaited<ReturnType<typeof machineOfRow>>, why: string): Promise<void> {
  if (!machine || machine.scheduling === MachineScheduling.removed) return;
  const res = await tx.db
    .updateTable('machines')
    .set({ scheduling: MachineScheduling.removed, updated_at: tx.now })
    .where('id', '=', machine.id)
    .where('scheduling', '=', machine.scheduling)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return;
  await tx.event({
    type: 'machine:removed',
    machineId: machine.id,
    message: `machine ${machine.name} removed (was ${machine.health}, ${machine.scheduling}): ${why}`,
    data: { from: machine.scheduling, health: machine.health },
  });
}

/** At most this many waits are kept: what `explain` needs for the head of the queue, not a copy of it. */
const MAX_WAITS = 1000;

export async function autoscaleWaitsPut(tx: TxContext, p: { waits: readonly Omit<AutoscaleWait, 'at'>[] }): Promise<void> {
  await tx.db.deleteFrom('autoscale_waits').execute();
  const seen = new Set<string>();
  const rows: { stage_id: string; kind: string; reason: string; pool: string | null; at: number }[] = [];
  for (const w of p.waits) {
    if (rows.length >= MAX_WAITS) break;
    if (seen.has(w.stageId)) continue;
    seen.add(w.stageId);
    rows.push({ stage_id: w.stageId, kind: w.kind, reason: w.reason, pool: w.pool, at: tx.now });
  }
  // 100 rows a statement: 500 bound values, well under SQLite's limit.
  for (let i = 0; i < rows.length; i += 100)
    await tx.db
      .insertInto('autoscale_waits')
      .values(rows.slice(i, i + 100))
      .execute();
}
