import type { HeartbeatResult } from '../store.js';
import { MachineHealth } from '../../domain/machine-health.js';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import { type HeartbeatParams, type HeldRow, killOf, leasesToRenew, placedOf, rowFresh, unreportedHeld, writesNothing } from './machine-verbs.js';
import { prepared } from './prepared-query.js';
import type { Db } from './tx-context.js';
import type { LivenessWrite } from './heartbeat-renewal.js';

/** What the read decided: the answer, and, where the heartbeat's only writes are its row's time and its listed leases, those writes (heartbeatRenewal). */
export interface HeartbeatRead {
  answer: HeartbeatResult;
  renew: LivenessWrite | null;
}

/**
 * A heartbeat that writes nothing, answered from one statement outside any transaction; null when
 * it must be written (or cannot be judged from that read), and the caller then runs
 * machineHeartbeat in its transaction, as every heartbeat ran before.
 *
 * Why: on PostgreSQL a heartbeat's transaction was four round trips (its begin, the machine's row,
 * what the machine holds, its commit), each a write to a socket that costs the server more than
 * the statement costs PostgreSQL (docs/throughput.md, "A fleet of agents": 0.5 ms of the servers'
 * CPU a heartbeat against SQLite's 0.13, most of it in those writes). An idle heartbeat under the
 * liveness loop (heartbeat-liveness.ts) is a read: its arrival is kept in memory and written with
 * other machines' by machinesSeen, and its transaction wrote nothing.
 *
 * Why it is the same answer: one statement reads one snapshot of committed rows, as the read-only
 * transaction did; the decision to write nothing is machineHeartbeat's own (rowFresh,
 * writesNothing, killOf), taken on the same rows. What this path leaves to the transaction: a
 * machine suspect or lost (the heartbeat brings it back: a guarded write), progress to write, an
 * attempt listed that the machine does not hold (its fence is read by id) or that was preempted
 * (its grace is read), a row older than the liveness allows, an attempt to release or lose. And a
 * read outside a transaction takes no SERIALIZABLE read locks: the liveness loop's and the
 * reaper's writes of the same rows no longer conflict with every idle heartbeat in flight.
 *
 * A heartbeat whose only writes would be its row's time (older than the liveness allows) and its
 * listed attempts' leases (older than renewAfterMs) is answered from the same read too, with those
 * writes in `renew`: the caller runs them as guarded writes (heartbeat-renewal.ts, where it says
 * why they need no SERIALIZABLE transaction). Anything else to write, null, as before.
 */
export async function machineHeartbeatRead(db: Db, now: number, p: HeartbeatParams): Promise<HeartbeatRead | null> {
  if (p.running.some((r) => r.progress)) return null;
  const rows = await machineAndHeld.rows(db, p.machineId);
  const m = rows[0];
  if (!m || m.health === MachineHealth.suspect || m.health === MachineHealth.lost) return null;
  const held: HeldRow[] = [];
  for (const r of rows) {
    if (r.attempt_id === null) continue;
    held.push({
      id: r.attempt_id,
      stage_id: r.stage_id!,
      token: r.token!,
      state: r.state!,
      machine_id: r.machine_id!,
      reason: r.reason,
      started_at: r.started_at,
      lease_expires_at: r.lease_expires_at,
    });
  }
  const byId = new Map(held.map((h) => [h.id, h]));
  if (p.running.some((r) => !byId.has(r.attemptId))) return null;
  const { kill, preempted } = killOf(m.id, p.running, byId);
  if (preempted.length) return null;
  const unreported = unreportedHeld(now, held, p);
  if (unreported.release.length > 0 || unreported.lose.length > 0) return null;
  const answer: HeartbeatResult = { health: m.health, kill, lost: [], placed: placedOf(held) };
  if (rowFresh(now, m, p) && writesNothing(now, unreported, p)) return { answer, renew: null };
  // What machineHeartbeat would write here: the row's time, and the listed leases but those it kills.
  return { answer, renew: { machineId: m.id, periodMs: p.period?.periodMs ?? null, attempts: leasesToRenew(p.running, kill), leaseMs: p.leaseMs } };
}

/** The machine's row and what it holds (not released: a partial index), one row per attempt held, or one with no attempt. */
const machineAndHeld = prepared<[id: string]>()((db, [id]) =>
  db
    .selectFrom('machines')
    .leftJoin('attempts', (j) => j.onRef('attempts.machine_id', '=', 'machines.id').on('attempts.released_at', 'is', null))
    .select([
      'machines.id as id',
      'machines.health as health',
      'machines.last_heartbeat_at as last_heartbeat_at',
      'machines.heartbeat_ms as heartbeat_ms',
      'attempts.id as attempt_id',
      'attempts.stage_id as stage_id',
      'attempts.token as token',
      'attempts.state as state',
      'attempts.machine_id as machine_id',
      'attempts.reason as reason',
      'attempts.started_at as started_at',
      'attempts.lease_expires_at as lease_expires_at',
    ])
    .where('machines.id', '=', id)
    .where('machines.scheduling', '!=', MachineScheduling.removed),
);
