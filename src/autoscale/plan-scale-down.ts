import { canTransition } from '../domain/transition-table.js';
import { placementMembers } from '../scheduler/placement-members.js';
import type { Plan } from '../scheduler/snapshot.js';
import { COUNTED_STATES, MachineLifecycle, machineLifecycleTransitions } from './machine-lifecycle.js';
import type { PoolTemplate } from './pool-template.js';

/** A machine the autoscaler started, as scale-down sees it. */
export interface AutoscaledMachine {
  id: string;
  name: string;
  pool: string;
  lifecycle: MachineLifecycle;
  /** When it was asked of the provider (ms): its boot timeout runs from here. */
  startedAt: number;
  /** Since when no attempt has held room on it (ms); null while one does. A machine that joined idle counts from its join. */
  idleSince: number | null;
  /** Attempts holding room on it now (running, or placed and not yet started). */
  attempts: number;
  /** Other work that waits on it: gang members to join, attempts leaving it for a preemption (0 when none). */
  waitsOnIt?: number;
  /** Its heartbeats stopped (health lost): its work was given up already; it is drained at once. */
  lost?: boolean;
}

export interface ScaleDownInput {
  machines: readonly AutoscaledMachine[];
  pools: readonly PoolTemplate[];
  /** The scheduler's latest plan: a machine it placed on, held for a waiting stage or preempts on is not idle. */
  plan?: Plan;
  /** ms. */
  now: number;
}

export const ScaleDownAction = {
  /** ready → draining: cordon it, so nothing new is placed, then release it once empty. */
  drain: 'drain',
  /** draining → released: it is empty; the provider stops it. */
  release: 'release',
  /** draining → ready: work was found on it (placed before the cordon); it stays. */
  keep: 'keep',
  /** provisioning/joining → failed: it did not join within its boot timeout. */
  fail: 'fail',
  /** failed → released: the provider stops what it may have started. */
  releaseFailed: 'release-failed',
} as const;
export type ScaleDownAction = (typeof ScaleDownAction)[keyof typeof ScaleDownAction];

export interface ScaleDownStep {
  machineId: string;
  name: string;
  pool: string;
  action: ScaleDownAction;
  from: MachineLifecycle;
  to: MachineLifecycle;
  /** "gpu-h100-2 idle 300 s: draining to release it". */
  reason: string;
}

const TARGET: Record<ScaleDownAction, MachineLifecycle> = {
  drain: MachineLifecycle.draining,
  release: MachineLifecycle.released,
  keep: MachineLifecycle.ready,
  fail: MachineLifecycle.failed,
  'release-failed': MachineLifecycle.released,
};

/**
 * What to stop (issue 30, docs/autoscaling.md "Scaling down"), pure, time injected. Never a kill:
 * a machine is drained only when no attempt holds room on it, nothing waits on it (a reservation,
 * a preemption, a placement of the latest pass, a gang) and it has been idle for its pool's
 * idleSeconds; it is released only once drained and still empty; one found with work goes back to
 * ready. A pool never drains below its min (counting machines up and starting); the longest idle
 * go first, and a pool keeps its spareMachines idle. A pool above its max (lowered by the operator) drains idle machines at once, down
 * to max. A lost machine (its heartbeats stopped) is drained at once, its work already given up.
 * A machine that has not joined within its boot timeout is failed, then released.
 * Machines of a pool no longer in the file are left alone (an operator's call, not this one's).
 */
export function planScaleDown(input: ScaleDownInput): ScaleDownStep[] {
  const { now } = input;
  const pools = new Map(input.pools.map((p) => [p.name, p]));
  const busy = new Set<string>();
  // A gang's placement takes every member's machine, not its rank 0's alone.
  for (const p of input.plan?.placements ?? []) for (const m of placementMembers(p)) busy.add(m.machineId);
  for (const r of input.plan?.reservations ?? []) busy.add(r.machineId);
  for (const p of input.plan?.preemptions ?? []) busy.add(p.machineId);
  const hasWork = (m: AutoscaledMachine) => m.attempts > 0 || (m.waitsOnIt ?? 0) > 0 || busy.has(m.id);

  const steps: ScaleDownStep[] = [];
  const step = (m: AutoscaledMachine, action: ScaleDownAction, reason: string) => {
    const to = TARGET[action];
    // The table is the one statement of what may happen; a step it refuses is a bug here, not an outcome.
    if (!canTransition(machineLifecycleTransitions, m.lifecycle, to))
      throw new Error(`planScaleDown: ${m.name} ${m.lifecycle} -> ${to} is not a lifecycle move`);
    steps.push({ machineId: m.id, name: m.name, pool: m.pool, action, from: m.lifecycle, to, reason });
  };

  const idle: AutoscaledMachine[] = [];
  const counted = new Map<string, number>();
  for (const m of input.machines) {
    const pool = pools.get(m.pool);
    if (pool === undefined) continue;
    if (COUNTED_STATES.has(m.lifecycle)) counted.set(m.pool, (counted.get(m.pool) ?? 0) + 1);
    switch (m.lifecycle) {
      case MachineLifecycle.provisioning:
      case MachineLifecycle.joining: {
        const timeout = pool.autoscale.bootTimeoutSeconds;
        if (now - m.startedAt >= timeout * 1000) step(m, ScaleDownAction.fail, `${m.name} did not join within ${timeout} s: failed, releasing it`);
        break;
      }
      case MachineLifecycle.ready:
        // A dead machine counted toward min and max would hold its pool there for good (a min it
        // keeps, a max it fills, never idle long if its attempts stay held): out, whatever it held,
        // which the reconciler has given up already. Its release still waits until nothing holds room.
        if (m.lost) step(m, ScaleDownAction.drain, `${m.name} is lost (its heartbeats stopped): draining to release it, in its place a machine that answers`);
        else if (!hasWork(m) && m.idleSince !== null) idle.push(m);
        break;
      case MachineLifecycle.draining:
        // A lost one's attempts hold their room until the reconciler lets go of it: not work to keep
        // it for (kept, it would be drained again, each pass); it is released once empty.
        if (m.lost && hasWork(m)) break;
        if (hasWork(m)) step(m, ScaleDownAction.keep, `${m.name} has work again: back in service`);
        else step(m, ScaleDownAction.release, `${m.name} drained: releasing it`);
        break;
      case MachineLifecycle.failed:
        step(m, ScaleDownAction.releaseFailed, `${m.name} failed to join: releasing it`);
        break;
      case MachineLifecycle.released:
        break;
    }
  }
  // A machine failed or drained (lost) this round no longer counts toward min or max.
  for (const s of steps) if (s.action === ScaleDownAction.fail || s.action === ScaleDownAction.drain) counted.set(s.pool, (counted.get(s.pool) ?? 0) - 1);

  idle.sort((a, b) => a.idleSince! - b.idleSince! || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const drained = new Set<string>();
  const idleLeft = new Map<string, number>();
  for (const m of idle) idleLeft.set(m.pool, (idleLeft.get(m.pool) ?? 0) + 1);
  for (const m of idle) {
    const pool = pools.get(m.pool)!;
    const n = counted.get(m.pool) ?? 0;
    if (n <= pool.autoscale.min || now - m.idleSince! < pool.autoscale.idleSeconds * 1000) continue;
    // The pool's spare machines are idle on purpose.
    if ((idleLeft.get(m.pool) ?? 0) <= pool.autoscale.spareMachines) continue;
    idleLeft.set(m.pool, (idleLeft.get(m.pool) ?? 0) - 1);
    counted.set(m.pool, n - 1);
    drained.add(m.id);
    step(m, ScaleDownAction.drain, `${m.name} idle ${Math.floor((now - m.idleSince!) / 1000)} s: draining to release it`);
  }
  // A pool above its max (the operator lowered it) sheds idle machines without waiting out their
  // idle time; busy ones stay until they are idle: never a kill.
  for (const m of idle) {
    const pool = pools.get(m.pool)!;
    const n = counted.get(m.pool) ?? 0;
    if (drained.has(m.id) || n <= pool.autoscale.max) continue;
    counted.set(m.pool, n - 1);
    step(m, ScaleDownAction.drain, `pool ${pool.name} has ${n} machines, above its max ${pool.autoscale.max}: draining idle ${m.name}`);
  }
  return steps;
}
