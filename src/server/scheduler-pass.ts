import type { Clock } from '../domain/clock.js';
import { stageNeed } from '../scheduler/checks.js';
import { gangNeedOf } from '../scheduler/gang-placer.js';
import { gangHeadsToRead } from '../scheduler/placeable-count.js';
import { DEFAULT_MAX_PLACEMENTS, planPlacements } from '../scheduler/plan-placements.js';
import { shapeDepths } from '../scheduler/shape-depths.js';
import { StaticClasses } from '../scheduler/static-classes.js';
import type { RecentWorkload } from '../scheduler/recent-workload.js';
import type { SharePolicyName } from '../scheduler/share-policies.js';
import type { Plan, QueuedStage, SchedulerSnapshot } from '../scheduler/snapshot.js';
import { gangSizeOf } from '../domain/resources.js';
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
  /** GPUs its plan held for waiting gangs (docs/gangs.md, "Its reservation"): each held machine counts a member's GPUs. Absent: none. */
  gangHeldGpus?: number;
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
export interface SchedulerPassOptions {
  leaseMs: number;
  maxPlacements?: number;
  preemptionCooldownMs?: number;
  gpuPolicy?: SharePolicyName;
  /** The GPU stages earlier passes saw: FGD's target workload (absent: this pass's snapshot alone). */
  recentWorkload?: RecentWorkload;
  /**
   * Place the autoscaler's holds first (docs/autoscaling.md, "Holds in the pass"): set where pools
   * are declared; without it nothing of the autoscaler's is read, and the pass costs what it did.
   */
  holds?: boolean;
}

export async function schedulerPass(store: PlacementSource, clock: Clock, opts: SchedulerPassOptions): Promise<SchedulerPassResult> {
  if (!opts.holds) return fullPass(store, clock, opts);
  const held = await placeHolds(store, clock, opts);
  const r = await fullPass(store, clock, opts, held.reserved);
  return held.placed || held.skipped ? { ...r, placed: r.placed + held.placed, skipped: r.skipped + held.skipped } : r;
}

/**
 * Each machine the autoscaler started and that has joined takes the stages it was started for
 * before anything else may have its room: a pass of the same planner over that one machine and
 * those stages (in their queue order, with the same options), applied with the usual re-checks.
 * The hold is then cleared, whatever was placed: a held stage gets one chance there, and one that
 * did not fit (its machine lost meanwhile, the team's quota reached) waits in the queue as any
 * other. No preemption: a hold takes only free room.
 *
 * A gang (docs/gangs.md) is held on each of the machines started for it, which join one by one:
 * it is tried on every joined machine that holds it together, and while fewer of them have joined
 * than it has members, their holds are kept and those machines are left out of the full pass (a
 * reservation, as the planner's for a gang: its first machines do not go to other work while the
 * rest boot). Returns those machines' ids.
 */
async function placeHolds(
  store: PlacementSource,
  clock: Clock,
  opts: SchedulerPassOptions,
): Promise<{ placed: number; skipped: number; reserved: Set<string> }> {
  const out = { placed: 0, skipped: 0, reserved: new Set<string>() };
  const holds = await store.autoscaleHeldStages({ now: clock.now() });
  const apply = async (machineIds: readonly string[], stages: QueuedStage[]) => {
    const now = clock.now();
    // Read for each: the one before may have placed on the teams' quotas (holds are rare: a
    // machine joining), and each machine's room is its own.
    const cluster = await store.clusterView();
    const machines = cluster.machines.filter((m) => machineIds.includes(m.id));
    if (machines.length === 0) return 0;
    const snapshot: SchedulerSnapshot = { clusterVersion: cluster.version, machines, queue: stages, teams: await store.schedulerTeams({ usage: true }), now };
    const plan = planPlacements(snapshot, {
      maxPlacements: opts.maxPlacements ?? DEFAULT_MAX_PLACEMENTS,
      gangs: true,
      ...(opts.gpuPolicy !== undefined ? { gpuPolicy: opts.gpuPolicy } : {}),
      ...(opts.recentWorkload !== undefined ? { targetWorkload: opts.recentWorkload.observe(snapshot) } : {}),
    });
    if (plan.placements.length === 0) return 0;
    const res = await store.planApply({ plan, now, leaseMs: opts.leaseMs });
    out.placed += res.applied.length;
    out.skipped += res.skipped.length;
    return res.applied.length;
  };
  // Gangs first, each on every joined machine that holds it.
  const gangs = new Map<string, { stage: QueuedStage; machineIds: string[] }>();
  for (const h of holds) {
    for (const st of h.stages) {
      if (gangSizeOf(st.resources) < 2) continue;
      const g = gangs.get(st.stageId) ?? { stage: st, machineIds: [] };
      g.machineIds.push(h.machineId);
      gangs.set(st.stageId, g);
    }
  }
  const waiting = new Set<string>();
  for (const [stageId, g] of gangs) {
    if ((await apply(g.machineIds, [g.stage])) > 0) continue;
    if (g.machineIds.length < gangSizeOf(g.stage.resources)) {
      waiting.add(stageId);
      for (const id of g.machineIds) out.reserved.add(id);
    }
  }
  for (const h of holds) {
    const single = h.stages.filter((st) => gangSizeOf(st.resources) < 2);
    if (single.length) await apply([h.machineId], single);
    if (h.stages.some((st) => waiting.has(st.stageId))) continue;
    await store.autoscaleHoldClear({ name: h.name, now: clock.now() });
  }
  return out;
}

async function fullPass(
  store: PlacementSource,
  clock: Clock,
  opts: SchedulerPassOptions,
  reserved: ReadonlySet<string> = new Set(),
): Promise<SchedulerPassResult> {
  const maxPlacements = opts.maxPlacements ?? DEFAULT_MAX_PLACEMENTS;
  const now = clock.now();
  // What waits first: the cluster's view reads every machine, and a pass with nothing ready (a
  // machine joining, or back from suspect, wakes one) must not pay for it. With 5,000 agents
  // joining, passes that found nothing to place spent half the server's CPU reading machines
  // (bench:fleet, profiled), enough to make heartbeats late, machines suspect, and their
  // returns wake more passes.
  const shapes = await store.readyShapes({ now });
  if (shapes.length === 0) return { placed: 0, skipped: 0, read: 0, more: false };
  const view = await store.clusterView();
  // Machines joined for a gang whose other machines are still booting: held for it (placeHolds).
  const cluster = reserved.size ? { ...view, machines: view.machines.filter((m) => !reserved.has(m.id)) } : view;
  // Teams matter when several have ready work (fair share) or one has a quota. Preemption looks at
  // attempts that may be stopped or are leaving: with any, a shape no room fits now still has its
  // head read, since it may preempt (or wait for room that is leaving).
  const named = new Set(shapes.map(teamOf));
  const listed = await store.schedulerTeams({ usage: false });
  const quotaBinds = listed.some((t) => named.has(t.name) && Object.keys(t.quota).length > 0);
  const teams = named.size > 1 || quotaBinds ? await store.schedulerTeams({ usage: true }) : listed;
  const running = await store.preemptionView();
  // A gang's shape is read as deep as whole gangs fit, and its head whenever it could run
  // somewhere idle (it is held its set, or preempts for it). The other shapes all at once
  // (shapeDepths: the machines grouped once by what the static checks read).
  const gangs = shapes.map((s) => gangNeedOf(s));
  const single = shapes.filter((_, i) => gangs[i] === null);
  const classes = new StaticClasses(cluster.machines);
  const depths = shapeDepths(single.map(stageNeed), cluster.machines, maxPlacements, running.length > 0, classes);
  let next = 0;
  const wants = shapes
    .map((s, i) => {
      const gang = gangs[i];
      return { shape: s.shape, limit: gang ? gangHeadsToRead(gang, cluster.machines, maxPlacements) : depths[next++]! };
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
    // The store applies a gang whole and ends it as one, and its members get the rendezvous
    // (docs/gangs.md, "Gangs in the store").
    gangs: true,
    // The machines as shapeDepths grouped them: not grouped again.
    staticClasses: classes,
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
  const gangHeld = gangHeldGpus(plan, queue);
  const held = gangHeld > 0 ? { gangHeldGpus: gangHeld } : {};
  if (plan.placements.length === 0 && !plan.preemptions?.length) return { placed: 0, skipped: 0, read: queue.length, more: false, ...held };
  const res = await store.planApply({ plan, now: clock.now(), leaseMs: opts.leaseMs });
  return {
    ...held,
    placed: res.applied.length,
    skipped: res.skipped.length,
    read: queue.length,
    more: plan.placements.length >= maxPlacements,
    ...(res.preempted?.length ? { preempted: res.preempted.length } : {}),
  };
}

/** The GPUs a plan holds for gangs that wait: a member's GPU count for each machine of a gang's held set (a metric's figure, gantry_gang_reserved_gpus). */
function gangHeldGpus(plan: Plan, queue: readonly QueuedStage[]): number {
  if (!plan.reservations?.length) return 0;
  const perMember = new Map(queue.filter((q) => gangSizeOf(q.resources) > 1).map((q) => [q.stageId, stageNeed(q).gpuCount]));
  return plan.reservations.reduce((n, r) => n + (perMember.get(r.stageId) ?? 0), 0);
}
