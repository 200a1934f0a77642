import { sql } from 'kysely';
import { MachineHealth } from '../../domain/machine-health.js';
import { renewLeases } from './machine-verbs.js';
import type { TxContext } from './tx-context.js';

/** A heartbeat's writes when they are only its liveness: its row's time, and its listed attempts' leases (machineHeartbeatRead's `renew`). */
export interface LivenessWrite {
  machineId: string;
  /** The period the heartbeat's answer gives, recorded with the time (null: the configured one). */
  periodMs: number | null;
  /** The attempts the heartbeat lists as running, less those its answer kills. */
  attempts: string[];
  leaseMs: number;
}

/**
 * A heartbeat's liveness written as two guarded writes, each re-checking on the row the only thing
 * it depends on, so the store runs them READ COMMITTED (as the liveness flush, machinesSeen), where
 * PostgreSQL takes no predicate locks for them and checks none of theirs: they can neither be
 * refused nor refuse another transaction. Under SERIALIZABLE, a lease-renewing heartbeat was
 * refused 468 / 606 times over a mass-loss run and refused the reapers' batches it overlapped
 * (docs/failure-detection.md, "Which writers the reapers meet").
 *
 * Why the protocols still hold (docs/failure-detection.md, "Leases and fencing"):
 * - A lease is extended only for an attempt still `running` on this machine, checked on the row's
 *   newest version (a row another transaction is writing is waited for, then checked again). An
 *   attempt lost, canceled or ended meanwhile keeps its state and gets no lease: the fence is the
 *   state, which only the reapers, reports and cancels move, each a guarded write of its own.
 * - The lost-attempts reaper judges a lease overdue and writes the attempt `lost` with
 *   `lease_expires_at < now` in its WHERE. SERIALIZABLE, a renewal committed after its snapshot is
 *   protected by PostgreSQL's first-updater rule, whatever the renewal's isolation: the reaper's
 *   write of a row updated since is refused (40001) and run again on the new lease, which it then
 *   leaves. READ COMMITTED (its loss batches, docs/failure-detection.md "Branch `massloss`"), the
 *   WHERE is checked again on the row's newest version, which holds the renewed lease. A reaper that committed first left the attempt `lost`, which the
 *   renewal's guard finds. So an attempt is lost at most once, and never with a lease this renewal
 *   extended first.
 * - The machine reaper's write of the machine's row is refused the same way when this row write
 *   committed after its snapshot (the machine is alive). One committed first left the machine
 *   suspect or lost, which this write's guard finds: it writes nothing and says so, and so does a
 *   listed attempt no longer running here (lost, canceled, preempted since the read). Then the
 *   caller answers from the heartbeat's SERIALIZABLE transaction instead (the machine brought
 *   back, the attempt in `kill` or `lost`), so the answer the read made is never sent when it is
 *   wrong. The time never moves back (`greatest`).
 * - Nothing here ends or readies anything, so nothing can be lost by it.
 */
export async function heartbeatRenewal(tx: TxContext, w: LivenessWrite): Promise<boolean> {
  // The time moves forward only (greatest), and only while the machine is still as the read found
  // it, neither suspect nor lost: a reaper's judgement committed since the read makes this write
  // nothing, and the caller runs the heartbeat's SERIALIZABLE transaction instead, which brings the
  // machine back and answers with what the judgement did.
  const row = await sql`update machines set last_heartbeat_at = greatest(last_heartbeat_at, ${tx.now}), heartbeat_ms = ${w.periodMs}
    where id = ${w.machineId} and health not in (${MachineHealth.suspect}, ${MachineHealth.lost})`.execute(tx.db);
  if (Number(row.numAffectedRows ?? 0) !== 1) return false;
  const renewed = await renewLeases(tx.db, w.machineId, w.attempts, tx.now + w.leaseMs);
  // Every listed attempt still running here, or the answer the read made would be wrong: one lost,
  // canceled or preempted since the read must come back in `kill` or `lost` now, not a period later.
  return renewed === w.attempts.length;
}
