import { activeAttemptStates } from '../../domain/attempt-state.js';
import { ConflictError } from '../../domain/errors.js';
import { MachineScheduling, machineSchedulingTransitions, removeRefusal } from '../../domain/machine-scheduling.js';
import { canTransition } from '../../domain/transition-table.js';
import type { MachineRecord } from '../records.js';
import type { MachineSchedulingChange } from '../store.js';
import { loseAttempt } from './attempt-verbs.js';
import { machineGet } from './machine-verbs.js';
import type { Db, Trx, TxContext } from './tx-context.js';

/**
 * An operator's verbs on a machine: cordon, uncordon, drain, remove. They change only what the
 * operator wants of it (`scheduling`), never its health, which heartbeats and the reconciler own;
 * and never its attempts: what runs there goes on. Each is one guarded write with its event.
 */

/** A machine not removed, by name or id (people type names; scripts may hold ids). */
async function findRow(db: Db | Trx, ref: string) {
  const rows = await db
    .selectFrom('machines')
    .selectAll()
    .where((eb) => eb.or([eb('name', '=', ref), eb('id', '=', ref)]))
    .where('scheduling', '!=', MachineScheduling.removed)
    .execute();
  // A name that happens to spell another machine's id means the machine of that name.
  return rows.find((r) => r.name === ref) ?? rows[0];
}

export async function machineFind(db: Db, ref: string): Promise<MachineRecord | null> {
  const row = await findRow(db, ref);
  return row ? machineGet(db, row.id) : null;
}

interface SchedulingVerb {
  to: MachineScheduling;
  /** States in which the verb has nothing to do: answered with `changed: false`, nothing written. */
  done: readonly MachineScheduling[];
  event: string;
  /** "cordoned: no new work is placed there" */
  says: string;
}

const cordon: SchedulingVerb = {
  to: MachineScheduling.cordoned,
  // A draining machine already takes no new work; cordoning it would only hide when it is drained.
  done: [MachineScheduling.cordoned, MachineScheduling.draining],
  event: 'machine:cordoned',
  says: 'cordoned: no new work is placed there; what runs there goes on',
};
const uncordon: SchedulingVerb = {
  to: MachineScheduling.eligible,
  done: [MachineScheduling.eligible],
  event: 'machine:uncordoned',
  says: 'uncordoned: back in service',
};
const drain: SchedulingVerb = {
  to: MachineScheduling.draining,
  done: [MachineScheduling.draining],
  event: 'machine:draining',
  says: 'draining: no new work is placed there; drained once what runs there has ended',
};

async function setScheduling(tx: TxContext, ref: string, verb: SchedulingVerb): Promise<MachineSchedulingChange | null> {
  const row = await findRow(tx.db, ref);
  if (!row) return null;
  const from = row.scheduling;
  const unchanged = async () => ({ machine: (await machineGet(tx.db, row.id))!, changed: false });
  if (verb.done.includes(from)) return unchanged();
  if (!canTransition(machineSchedulingTransitions, from, verb.to)) {
    throw new ConflictError(`machine ${row.name} is ${row.health} and ${from}; it cannot become ${verb.to}`);
  }
  const res = await tx.db
    .updateTable('machines')
    .set({ scheduling: verb.to, updated_at: tx.now })
    .where('id', '=', row.id)
    .where('scheduling', '=', from)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return unchanged();
  await tx.event({ type: verb.event, machineId: row.id, message: `machine ${row.name} ${verb.says} (was ${from})`, data: { from, to: verb.to } });
  // Uncordoned: room the scheduler could not use before; wake it.
  if (verb.to === MachineScheduling.eligible) await tx.publish('capacity:freed', { machineId: row.id });
  return { machine: (await machineGet(tx.db, row.id))!, changed: true };
}

export const machineCordon = (tx: TxContext, p: { machine: string }) => setScheduling(tx, p.machine, cordon);
export const machineUncordon = (tx: TxContext, p: { machine: string }) => setScheduling(tx, p.machine, uncordon);
/**
 * Drain; with `stopRunning` (an agent to be stopped for good, at once), the attempts still active
 * there are stopped too: lost, with a reason that says so, and charged to no budget (their stages
 * go back to the queue at once, as if never started). Their resources stay held until the agent,
 * told on its next heartbeat, has killed them, as for any lost attempt.
 */
export async function machineDrain(tx: TxContext, p: { machine: string; stopRunning: boolean; jitter: number }): Promise<MachineSchedulingChange | null> {
  const change = await setScheduling(tx, p.machine, drain);
  if (!change || !p.stopRunning) return change;
  const active = await tx.db
    .selectFrom('attempts')
    .selectAll()
    .where('machine_id', '=', change.machine.id)
    .where('released_at', 'is', null)
    .where('state', 'in', activeAttemptStates)
    .execute();
  let stopped = 0;
  for (const a of active) {
    if (await loseAttempt(tx, a, `stopped: machine ${change.machine.name} drained at once by an operator`, p.jitter, false)) stopped++;
  }
  if (stopped === 0) return { ...change, stopped };
  return { machine: (await machineGet(tx.db, change.machine.id))!, changed: true, stopped };
}

/**
 * Forgets a machine: it leaves listings and the scheduler's cluster, but its row stays (as
 * `removed`), so every attempt that ran there keeps its machine's name. Refused with a
 * ConflictError naming why (removeRefusal) unless it is lost, or cordoned or drained with nothing
 * left on it. The write is guarded on the health and scheduling read, so a machine that came back
 * or was uncordoned meanwhile is not removed.
 */
export async function machineRemove(tx: TxContext, p: { machine: string }): Promise<MachineSchedulingChange | null> {
  const row = await findRow(tx.db, p.machine);
  if (!row) return null;
  const counts = await tx.db
    .selectFrom('attempts')
    .select((eb) => [
      eb.fn.countAll<number>().as('held'),
      eb.fn.sum<number>(eb.case().when('state', 'in', activeAttemptStates).then(1).else(0).end()).as('active'),
    ])
    .where('machine_id', '=', row.id)
    .where('released_at', 'is', null)
    .executeTakeFirstOrThrow();
  const health = row.health;
  const from = row.scheduling;
  const refusal = removeRefusal({ name: row.name, health, scheduling: from, heldAttempts: Number(counts.held), activeAttempts: Number(counts.active ?? 0) });
  if (refusal) throw new ConflictError(refusal);
  if (!canTransition(machineSchedulingTransitions, from, MachineScheduling.removed))
    throw new ConflictError(`machine ${row.name} is ${from}; it cannot be removed`);
  const res = await tx.db
    .updateTable('machines')
    .set({ scheduling: MachineScheduling.removed, updated_at: tx.now })
    .where('id', '=', row.id)
    .where('scheduling', '=', from)
    .where('health', '=', health)
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) throw new ConflictError(`machine ${row.name} changed while it was being removed; try again`);
  await tx.event({
    type: 'machine:removed',
    machineId: row.id,
    message: `machine ${row.name} removed (was ${health}, ${from}); the attempts that ran there keep its name`,
    data: { from, health },
  });
  return { machine: (await machineGet(tx.db, row.id))!, changed: true };
}
