import type { Clock } from '../domain/clock.js';
import { stageNeed } from '../scheduler/checks.js';
import { headsToRead, mayRunSomewhere } from '../scheduler/placeable-count.js';
import { DEFAULT_MAX_PLACEMENTS, planPlacements } from '../scheduler/plan-placements.js';
import type { RecentWorkload } from '../scheduler/recent-workload.js';
import type { SharePolicyName } from '../scheduler/share-policies.js';
import type { SchedulerSnapshot } from '../scheduler/snapshot.js';
import { teamOf } from '../scheduler/team-ledger.js';
import type { PlacementSource } from '../store/store.js';

export interface SchedulerPassResult {
  placed: number;
  skipped: number;
  /** Stages read from the queues: what the pass cost, bounded by the room, not the backlog. */
  read: number;
  /** The pass stopped at maxPlacements; run another. */
  more: boolean;
  /** Attempts it preempted. */
  preempted?: number;
}

/**
 * One scheduling pass: the cluster's free room, the shapes with ready stages, the head of each
 * shape's queue only as deep as that room could take stages of the shape (placeableCount), the
 * pure planner over those heads, and the plan applied with re-checks. The heads are exactly the
 * stages a greedy pass over the whole queue could place, so the plan is the same as reading
 * everything; the cost is the number of shapes plus the placements, however many stages wait
 * (docs/scheduling.md). It runs inside the transaction that readied stages or freed capacity
 * where the store has one writer (Store.placeBeforeCommit), else from the loop around it
 * (server/loop.ts) when a pool gets ready stages or capacity frees up; and from the loop on an
 * interval, for backoffs that ended.
 */
export async function schedulerPass(
  store: PlacementSource,
  clock: Clock,
  opts: {
    leaseMs: number;
    maxPlacements?: number;
    preemptionCooldownMs?: number;
    gpuPolicy?: SharePolicyName;
    /** The GPU stages earlier passes saw: FGD's target workload (absent: this pass's snapshot alone). */
    recentWorkload?: RecentWorkload;
  },
): Promise<SchedulerPassResult> {
  const maxPlacements = opts.maxPlacements ?? DEFAULT_MAX_PLACEMENTS;
  const now = clock.now();
  const cluster = await store.clusterView();
  const shapes = await store.readyShapes({ now });
  if (shapes.length === 0) return { placed: 0, skipped: 0, read: 0, more: false };
  // Teams matter when several have ready work (fair share) or one has a quota. Preemption looks at
  // attempts that may be stopped or are leaving: with any, a shape no room fits now still has its
  // head read, since it may preempt (or wait for room that is leaving).
  const named = new Set(shapes.map(teamOf));
  const listed = await store.schedulerTeams({ usage: false });
  const quotaBinds = listed.some((t) => named.has(t.name) && Object.keys(t.quota).length > 0);
  const teams = named.size > 1 || quotaBinds ? await store.schedulerTeams({ usage: true }) : listed;
  const running = await store.preemptionView();
  const wants = shapes
    .map((s) => {
      const need = stageNeed(s);
      const room = headsToRead(need, cluster.machines, maxPlacements);
      return { shape: s.shape, limit: room === 0 && running.length > 0 && mayRunSomewhere(need, cluster.machines) ? 1 : room };
    })
    .filter((w) => w.limit > 0);
  if (wants.length === 0) return { placed: 0, skipped: 0, read: 0, more: false };
  const queue = await store.queueHeads({ now, shapes: wants });
  if (queue.length === 0) return { placed: 0, skipped: 0, read: 0, more: false };
  const snapshot: SchedulerSnapshot = {
    clusterVersion: cluster.version,
    machines: cluster.machines,
    queue,
    teams,
    now,
    ...(running.length ? { running, ...(opts.preemptionCooldownMs !== undefined ? { preemptionCooldownMs: opts.preemptionCooldownMs } : {}) } : {}),
  };
  const planOptions = {
    maxPlacements,
    ...(opts.gpuPolicy !== undefined ? { gpuPolicy: opts.gpuPolicy } : {}),
    ...(opts.recentWorkload !== undefined ? { targetWorkload: opts.recentWorkload.observe(snapshot) } : {}),
  };
  let plan = planPlacements(snapshot, planOptions);
  // Machines held for large stages may take smaller work that ends before those could start
  // (backfill): planned again with the time limits of what runs there, only when it could matter.
  const holds = plan.reservations ?? [];
  if (holds.length && queue.some((q) => q.timeoutSeconds)) {
    const heldUntil = await store.heldUntil({ machineIds: [...new Set(holds.map((h) => h.machineId))], now });
    plan = planPlacements({ ...snapshot, heldUntil }, planOptions);
  }
  if (plan.placements.length === 0 && !plan.preemptions?.length) return { placed: 0, skipped: 0, read: queue.length, more: false };
  const res = await store.planApply({ plan, now: clock.now(), leaseMs: opts.leaseMs });
  return {
    placed: res.applied.length,
    skipped: res.skipped.length,
    read: queue.length,
    more: plan.placements.length >= maxPlacements,
    ...(res.preempted?.length ? { preempted: res.preempted.length } : {}),
  };
}
