import { sql } from 'kysely';
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
 * - The lost-attempts reaper judges a lease overdue by a write guarded on the lease it read
 *   (`lease_expires_at < …`, SERIALIZABLE): a renewal committed after its snapshot makes its write
 *   a concurrent update, refused (40001) and run again on the new lease, which it then leaves; a
 *   reaper that committed first left the attempt `lost`, which the renewal's guard finds. So an
 *   attempt is lost at most once, and never with a lease this renewal extended first.
 * - The machine reaper's write is guarded on the heartbeat time it read (`last_heartbeat_at = ?`):
 *   this row write committed first refuses it in the same way (the machine is alive); committed
 *   after a loss, it moves the time of a lost machine forward and nothing else, as the liveness
 *   flush does, and the machine's next heartbeat brings it back in its transaction (its health is
 *   read there). The time never moves back (`< at`).
 * - Nothing here ends or readies anything, so nothing can be lost by it.
 */
export async function heartbeatRenewal(tx: TxContext, w: LivenessWrite): Promise<void> {
  await sql`update machines set last_heartbeat_at = ${tx.now}, heartbeat_ms = ${w.periodMs}
    where id = ${w.machineId} and last_heartbeat_at < ${tx.now}`.execute(tx.db);
  for (let i = 0; i < w.attempts.length; i += 500) {
    await tx.db
      .updateTable('attempts')
      .set({ lease_expires_at: tx.now + w.leaseMs })
      .where('id', 'in', w.attempts.slice(i, i + 500))
      .where('machine_id', '=', w.machineId)
      .where('state', '=', 'running')
      .execute();
  }
}
