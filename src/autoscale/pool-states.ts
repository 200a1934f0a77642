import type { AutoscaleRow } from './autoscale-row.js';
import { bootBackoffUntil } from './boot-backoff.js';
import { COUNTED_STATES, MachineLifecycle, STARTING_STATES } from './machine-lifecycle.js';
import type { AutoscaledMachine } from './plan-scale-down.js';
import type { PoolState } from './plan-scale-up.js';
import type { PoolTemplate } from './pool-template.js';

/** A pool's state for planScaleUp, and its starting rows in the order of `startingFor` (a WaitingStage's startingOn names them by index). */
export interface PoolRows {
  state: PoolState;
  starting: AutoscaleRow[];
}

/**
 * Each declared pool's state, from the database's rows alone (never from memory), so a restarted
 * server or a new leader decides as the old one would have (docs/autoscaling.md, "The loop"):
 *
 * - counted, starting, idle: from the lifecycles (machine-lifecycle.ts's COUNTED_STATES and
 *   STARTING_STATES; idle: ready with no attempt holding room);
 * - startedThisInterval: rows whose start was decided within the last `intervalMs`;
 * - backoffUntil: bootBackoffUntil over the pool's failures in a row (newest first, up to the
 *   latest machine that joined), the last one dated by when it was failed (its row's last change
 *   while failed; once released, the end of its boot timeout or its release, whichever came first);
 * - startingFor: the stages each starting row is held for.
 *
 * `rows` are every row the pool ever had that the store still keeps (released ones included):
 * the failures in a row need them.
 */
export function poolStates(rows: readonly AutoscaleRow[], pools: readonly PoolTemplate[], now: number, intervalMs: number): Map<string, PoolRows> {
  const out = new Map<string, PoolRows>();
  for (const pool of pools) {
    const mine = rows.filter((r) => r.pool === pool.name).sort((a, b) => a.startedAt - b.startedAt || (a.name < b.name ? -1 : 1));
    const starting = mine.filter((r) => STARTING_STATES.has(r.lifecycle));
    let failures = 0;
    let lastFailureAt: number | null = null;
    for (const r of [...mine].reverse()) {
      if (r.joinedAt !== null) break;
      if (r.failReason === null) continue;
      failures++;
      // The row keeps no time of its failure: while failed, its last change is; once released (a
      // pass later), its boot timeout's end or its release, whichever came first, is at most a pass late.
      const at =
        r.lifecycle === MachineLifecycle.failed ? r.updatedAt : Math.min(r.releasedAt ?? r.updatedAt, r.startedAt + pool.autoscale.bootTimeoutSeconds * 1000);
      lastFailureAt = Math.max(lastFailureAt ?? at, at);
    }
    out.set(pool.name, {
      starting,
      state: {
        pool: pool.name,
        counted: mine.filter((r) => COUNTED_STATES.has(r.lifecycle)).length,
        starting: starting.length,
        startedThisInterval: mine.filter((r) => r.startedAt > now - intervalMs).length,
        backoffUntil: bootBackoffUntil(failures, lastFailureAt),
        idle: mine.filter((r) => r.lifecycle === MachineLifecycle.ready && r.attempts === 0).length,
        startingFor: starting.map((r) => r.heldFor),
      },
    });
  }
  return out;
}

/**
 * The rows scale-down looks at (not released), as planScaleDown takes them: a joined machine by its
 * id in the cluster, else by its name; `lost`: the ids of the cluster's machines whose health is lost.
 */
export function scaledMachines(rows: readonly AutoscaleRow[], lost: ReadonlySet<string> = new Set()): AutoscaledMachine[] {
  return rows
    .filter((r) => r.lifecycle !== MachineLifecycle.released)
    .map((r) => ({
      id: r.machineId ?? r.name,
      name: r.name,
      pool: r.pool,
      lifecycle: r.lifecycle,
      startedAt: r.startedAt,
      idleSince: r.idleSince,
      attempts: r.attempts,
      ...(r.machineId !== null && lost.has(r.machineId) ? { lost: true } : {}),
    }));
}
