import { GPU_MILLI_WHOLE, gpuFreeMilli, normalizeGpuType } from '../domain/resources.js';
import { firstReject, gpuCountsByType, isBusyReason, machineRefusal, RejectReason, stageNeed, type StageNeed } from './checks.js';
import { chooseGang, gangNeedOf, gangTotal, type GangNeed } from './gang-placer.js';
import { GpuPlacer } from './gpu-placer.js';
import { needKey } from './need-key.js';
import { machineReject, pendingReason, type MachineReject } from './pending-reason.js';
import { releaseAllocation, takeAllocation } from './placement-fit.js';
import { chooseGangPreemption, choosePreemption, DEFAULT_PREEMPTION_COOLDOWN_MS, type PreemptionInputs } from './plan-preemptions.js';
import { bestCandidate, candidatesOn, compareMachines, type Candidate } from './rank.js';
import { DEFAULT_SHARE_POLICY, type SharePolicyName } from './share-policies.js';
import type {
  HeldUntil,
  MachineView,
  PendingStage,
  Plan,
  PlannedPlacement,
  PlannedPreemption,
  QueuedStage,
  RunningAttempt,
  SchedulerSnapshot,
} from './snapshot.js';
import { seekCandidates, type Sought } from './seek-candidates.js';
import { snapshotWorkload } from './snapshot-workload.js';
import { sortIfNeeded } from './sorted.js';
import type { StaticClasses } from './static-classes.js';
import type { TargetWorkload } from './target-workload.js';
import { fairOrder, TeamLedger, teamOf } from './team-ledger.js';

export const DEFAULT_CANDIDATE_LIMIT = 64;
export const DEFAULT_MAX_PLACEMENTS = 1000;

export interface PlanOptions {
  /** At most this many placements per pass; stages after the one that reaches it are not reported. */
  maxPlacements?: number;
  /**
   * CPU stages: stop scanning once this many feasible machines were found (bounded work per
   * stage). GPU stages are scored on every eligible machine, from the share planner's cache
   * (gpu-placer.ts): the policy compares them all, as the simulator does.
   */
  candidateLimit?: number;
  /** How GPU stages choose a machine and GPUs (docs/scheduling.md, "Placement of shares"); default FGD. */
  gpuPolicy?: SharePolicyName;
  /** FGD's target workload; default: the snapshot's (snapshotWorkload: queued stages and active attempts). */
  targetWorkload?: TargetWorkload;
  /**
   * The caller applies a gang's placement whole, every member (docs/gangs.md): the server's
   * scheduler pass does. A caller that does not plans no gang: applied as rank 0 alone it would run
   * one member of a distributed run. Without it a gang waits, with that as its reason, and holds nothing.
   */
  gangs?: boolean;
  /**
   * Whether a gang that does not fit is held its machine set (docs/gangs.md, "Its reservation");
   * default true. False is the policy the simulator compares it with (src/sim/gang-replay.ts): the
   * gang waits without holding anything, and smaller work behind it may take what frees.
   */
  gangReservations?: boolean;
  /**
   * The snapshot's machines, in the snapshot's order, grouped by their static checks (`new
   * StaticClasses(snapshot.machines)`): where the caller built them already (the server's pass,
   * for the shapes' depths), the planner groups them no second time. Absent: built here.
   */
  staticClasses?: StaticClasses;
}

/**
 * Why a gang waits where the caller does not plan gangs (PlanOptions.gangs false): the server's
 * pass and the autoscaler do; the simulator's replays, which apply one machine per placement, do
 * not, and a gang among their stages waits with this word rather than run as rank 0 alone.
 */
export const GANGS_NOT_APPLIED = 'a gang stage (resources.machines 2 or more): this planner does not place gangs (PlanOptions.gangs)';

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** At most this many preemptions are planned in one pass: each frees a machine's worth, and the next pass sees the result. */
export const MAX_PREEMPTIONS_PER_PASS = 16;

/**
 * Scheduling order within a team (docs/scheduling.md, "Order"): priority desc, then the job's
 * submission asc (a stage without one: its readySince), then, at the same priority and time, a
 * stage with a submission time before one without, then job id where both have one (jobs
 * submitted in the same millisecond, a batch: ids ascend in submission order), then readySince
 * asc, then stageId asc. A total order (a comparison of a tuple, term by term): the pass merges
 * runs of stages lazily by it (fairOrder), which gives a sort's order only where it is one.
 */
export function compareQueued(a: QueuedStage, b: QueuedStage): number {
  return b.priority - a.priority || (a.submittedAt ?? a.readySince) - (b.submittedAt ?? b.readySince) || compareAtOneTime(a, b);
}

/**
 * compareQueued's terms after priority and time. Job ids only where both stages have a
 * submission time; before, a stage with one and a stage without one compared by readiness alone,
 * while two with one compared by job: that order could be circular (docs/scheduling.md, "Order").
 */
function compareAtOneTime(a: QueuedStage, b: QueuedStage): number {
  const submitted = a.submittedAt !== undefined;
  if (submitted !== (b.submittedAt !== undefined)) return submitted ? -1 : 1;
  return (submitted ? compareText(a.jobId, b.jobId) : 0) || a.readySince - b.readySince || compareText(a.stageId, b.stageId);
}

/** A deep-enough copy that placements can consume without touching the snapshot. */
function workingCopy(m: MachineView): MachineView {
  return { ...m, gpus: m.gpus.map((g) => ({ ...g })) };
}

/** Identical needs get identical outcomes within a pass (capacity only shrinks), so a failed shape is remembered. */
const shapeKey = needKey;

const NONE: ReadonlySet<string> = new Set();

/**
 * Where a waiting multi-GPU stage is held a place: of the machines it fits when idle but whose
 * GPUs are busy now, the one with the most free GPUs of a type it accepts (the nearest to fitting;
 * run times are unknown, so "frees first" is read as "has the least left to free"), then by name.
 * Null for a stage of one GPU (any GPU freed anywhere serves it), or when no such machine exists.
 */
function reservationFor(need: StageNeed, machines: readonly MachineView[], held: ReadonlySet<string>): MachineView | null {
  if (need.gpuCount < 2) return null;
  let best: { m: MachineView; free: number } | null = null;
  for (const m of machines) {
    if (held.has(m.id) || firstReject(need, m) !== RejectReason.gpuBusy) continue;
    let free = 0;
    for (const c of gpuCountsByType(need, m).values()) if (c.total >= need.gpuCount) free = Math.max(free, c.free);
    if (best === null || free > best.free) best = { m, free };
  }
  return best?.m ?? null;
}

interface Scan {
  candidates: Candidate[];
  rejects: MachineReject[];
}

function scan(
  need: StageNeed,
  machines: readonly MachineView[],
  limit: number,
  into: Scan,
  held: ReadonlySet<string> = NONE,
  /** Whether this stage may backfill a held machine (it ends before the held stage could start there). */
  backfills: (m: MachineView) => boolean = () => false,
): void {
  let found = 0;
  // Rejects are read, never changed: one alike the machine before's is pushed again, not made anew
  // (a shape no machine takes is rejected by each of 10,000: most of a pass's garbage was these).
  let last: MachineReject | null = null;
  for (const m of machines) {
    if (found >= limit) return;
    const fits = firstReject(need, m);
    // Held for a stage before this one: as good as busy for it, unless it backfills.
    const reason = held.has(m.id) && fits === null && !backfills(m) ? (need.gpuCount > 0 ? RejectReason.gpuBusy : RejectReason.cpuBusy) : fits;
    if (reason === null) {
      found += 1;
      into.candidates.push(...candidatesOn(need, m));
    } else {
      if (last === null || last.reason !== reason || last.health !== m.health || last.scheduling !== m.scheduling || last.heldAttempts !== m.heldAttempts)
        last = machineReject(m, reason);
      into.rejects.push(last);
    }
  }
}

/**
 * When a held stage could start on its machine at the latest, by the time limits of what holds
 * room there (docs/scheduling.md, "Backfill"): attempts are freed in the order they must end
 * until it fits; null when that needs one with no limit, or it never fits.
 */
function expectedStart(need: StageNeed, m: MachineView, held: readonly HeldUntil[]): number | null {
  const copy = workingCopy(m);
  const onIt = held.filter((h) => h.machineId === m.id).sort((a, b) => (a.endsBy ?? Infinity) - (b.endsBy ?? Infinity));
  for (const h of onIt) {
    // Room this pass placed is in the copy but not in `held`: it never frees here (conservative).
    const milli = h.gpuMilli ?? GPU_MILLI_WHOLE;
    if (
      h.gpuIndices.some((i) => {
        const g = copy.gpus.find((x) => x.index === i);
        return g === undefined || GPU_MILLI_WHOLE - gpuFreeMilli(g) < milli;
      })
    )
      return null;
    releaseAllocation(copy, h);
    if (firstReject(need, copy) === null) return h.endsBy;
  }
  return null;
}

/**
 * One greedy scheduling pass over the snapshot: which queued stages go where now, and why the
 * rest wait. Pure and deterministic; the caller re-checks the plan when applying it.
 */
export function planPlacements(snapshot: SchedulerSnapshot, opts: PlanOptions = {}): Plan {
  const maxPlacements = Math.floor(opts.maxPlacements ?? DEFAULT_MAX_PLACEMENTS);
  const limit = Math.max(1, Math.floor(opts.candidateLimit ?? DEFAULT_CANDIDATE_LIMIT));

  // The snapshot's machines in name order (the server reads them so: then no sort), by index.
  const order = sortIfNeeded(
    snapshot.machines.map((_, i) => i),
    (a, b) => compareMachines(snapshot.machines[a]!, snapshot.machines[b]!),
  );
  // The snapshot's own machines until the pass places on one: then its working copy takes its
  // place in these arrays (`own`), so that the snapshot is left as it was and the 10,000 machines
  // a pass mostly only reads are not copied (docs/throughput.md, "Placement at scale").
  const machines = order.map((i) => snapshot.machines[i]!);
  const cpuOnly = machines.filter((m) => m.gpus.length === 0);
  const withGpus = machines.filter((m) => m.gpus.length > 0);
  /** Per position in `machines`, the snapshot's machine there, its place in `cpuOnly` or `withGpus`, and its working copy once made. */
  const sources = machines.slice();
  const parts = new Int32Array(machines.length);
  const copies: (MachineView | undefined)[] = new Array<MachineView | undefined>(machines.length);
  {
    let cpu = 0;
    let gpu = 0;
    for (let i = 0; i < machines.length; i++) parts[i] = machines[i]!.gpus.length === 0 ? cpu++ : gpu++;
  }
  /**
   * Where a machine of the pass (the snapshot's, or its copy) is in `machines`, found by name and
   * id in their order (`compareMachines`), not from a map over every machine made each pass for
   * the thousand placements that ask (docs/throughput.md, "Placement at scale"); -1 for one not
   * there. Machines of one name and id (not a snapshot the store makes) are told apart by a scan.
   */
  const positionOf = (m: MachineView): number => {
    let lo = 0;
    let hi = machines.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const c = compareMachines(machines[mid]!, m);
      if (c < 0) lo = mid + 1;
      else if (c > 0) hi = mid - 1;
      else if (sources[mid] === m || copies[mid] === m) return mid;
      else break;
    }
    for (let i = 0; i < machines.length; i++) if (sources[i] === m || copies[i] === m) return i;
    return -1;
  };
  /** The pass's working copy of the machine (made on its first placement), which the arrays hold from then on. */
  const own = (m: MachineView): MachineView => {
    const at = positionOf(m);
    if (at < 0) return m;
    // A copy already (or the snapshot's machine whose copy was made: that copy).
    const known = copies[at];
    if (known !== undefined) return known;
    const copy = (copies[at] = workingCopy(m));
    machines[at] = copy;
    (copy.gpus.length === 0 ? cpuOnly : withGpus)[parts[at]!] = copy;
    return copy;
  };
  const given = opts.staticClasses;
  if (given !== undefined && given.size !== snapshot.machines.length)
    throw new Error(`planPlacements: staticClasses groups ${given.size} machines, the snapshot has ${snapshot.machines.length}`);
  const gpuClasses = given?.subset(
    withGpus,
    order.filter((i) => snapshot.machines[i]!.gpus.length > 0),
  );
  const ledger = new TeamLedger(
    snapshot.teams,
    machines.filter((m) => machineRefusal(m) === null),
  );

  const gpuPlacer = new GpuPlacer(withGpus, opts.gpuPolicy ?? DEFAULT_SHARE_POLICY, () => opts.targetWorkload ?? snapshotWorkload(snapshot), gpuClasses);

  const placements: PlannedPlacement[] = [];
  const pending: PendingStage[] = [];
  const failedShapes = new Map<string, { reason: string; unplaceable: boolean }>();
  /** CPU stages allowed on GPU machines that waited, for the second look below. */
  const mayUseGpuMachines: { stage: QueuedStage; need: StageNeed; at: number }[] = [];
  /** GPU machines where this pass placed GPU work (and so freed their share for CPU work). */
  const gpusTaken = new Set<string>();
  /** Machines held for waiting multi-GPU stages: nothing later in the order is placed there in this pass. */
  const held = new Set<string>();
  const reservations: { stageId: string; machineId: string }[] = [];
  /** Where in the order each hold was made: a hold binds only the stages after it. */
  const heldAt = new Map<string, number>();
  /** Each held machine's expected start for the stage it is held for (null: unknown, no backfill). */
  const heldStart = new Map<string, number | null>();
  const now = snapshot.now ?? 0;
  const backfillFor = (stage: QueuedStage) => {
    const t = stage.timeoutSeconds;
    if (!t || !snapshot.heldUntil) return undefined;
    const ends = now + t * 1000;
    return (m: MachineView) => {
      const start = heldStart.get(m.id);
      return start !== undefined && start !== null && ends <= start;
    };
  };

  /** Takes a GPU stage's (or gang member's) room on the machine, for the rest of the pass. */
  const takeGpus = (stage: QueuedStage, need: StageNeed, given: MachineView, gpuIndices: number[]): PlannedPlacement => {
    const m = own(given);
    const share = need.gpuMilli < GPU_MILLI_WHOLE;
    const placement: PlannedPlacement = {
      stageId: stage.stageId,
      machineId: m.id,
      gpuIndices,
      ...(share ? { gpuMilli: need.gpuMilli } : {}),
      ...(share && need.gpuMemoryBytes !== null ? { gpuMemoryBytes: need.gpuMemoryBytes } : {}),
      cpuMillis: need.cpuMillis,
      memoryBytes: need.memoryBytes,
    };
    const gpuType = normalizeGpuType(m.gpus.find((g) => g.index === gpuIndices[0])!.type);
    takeAllocation(m, placement);
    gpuPlacer.took(m.id, need, gpuIndices);
    ledger.add(teamOf(stage), { cpuMillis: need.cpuMillis, memoryBytes: need.memoryBytes, gpuCount: gpuIndices.length, gpuMilli: need.gpuMilli, gpuType });
    gpusTaken.add(m.id);
    return placement;
  };
  const takeCpu = (stage: QueuedStage, need: StageNeed, given: MachineView): PlannedPlacement => {
    const m = own(given);
    const placement = { stageId: stage.stageId, machineId: m.id, gpuIndices: [], cpuMillis: need.cpuMillis, memoryBytes: need.memoryBytes };
    takeAllocation(m, placement);
    if (m.gpus.length > 0) gpuPlacer.took(m.id, need, []);
    ledger.add(teamOf(stage), { cpuMillis: need.cpuMillis, memoryBytes: need.memoryBytes, gpuCount: 0, gpuType: null });
    return placement;
  };
  const placeGpuStage = (stage: QueuedStage, need: StageNeed, m: MachineView, gpuIndices: number[]) =>
    void placements.push(takeGpus(stage, need, m, gpuIndices));
  const placeCpuStage = (stage: QueuedStage, need: StageNeed, m: MachineView) => void placements.push(takeCpu(stage, need, m));
  /** Machines where a gang was placed in this pass: no later gang holds them (docs/gangs.md, "No deadlock"). */
  const gangTaken = new Set<string>();
  /** Holds machines for a waiting stage (a gang: its whole set) for the rest of the pass; `start` is when it could start there (backfill). */
  const hold = (stage: QueuedStage, at: number, ms: readonly MachineView[], start: (m: MachineView) => number | null) => {
    for (const m of ms) {
      held.add(m.id);
      heldAt.set(m.id, at);
      if (snapshot.heldUntil) heldStart.set(m.id, start(m));
      reservations.push({ stageId: stage.stageId, machineId: m.id });
    }
  };

  /**
   * A gang (docs/gangs.md): all members placed in this pass, or none; one that waits is held its
   * whole machine set when no earlier stage holds any of it. Charged to its team's quota whole.
   */
  const placeGang = (stage: QueuedStage, gang: GangNeed, at: number) => {
    if (!opts.gangs) return void pending.push({ stageId: stage.stageId, reason: GANGS_NOT_APPLIED, unplaceable: true });
    const team = teamOf(stage);
    const quota = stage.preemptible ? { need: gangTotal(gang), blocked: null, never: false } : ledger.withinQuota(team, gangTotal(gang), machines);
    if (quota.blocked !== null) return void pending.push({ stageId: stage.stageId, reason: quota.blocked, unplaceable: quota.never });
    const member = { ...gang.member, gpuTypes: quota.need.gpuTypes };
    const key = `gang|${gang.size}|${gang.sameLabel ?? ''}|${shapeKey(member)}|${ledger.hasQuota(team) && !stage.preemptible ? team : ''}`;
    const known = failedShapes.get(key);
    if (known !== undefined && !(heldStart.size > 0 && stage.timeoutSeconds))
      return void pending.push({ stageId: stage.stageId, reason: known.reason, unplaceable: known.unplaceable });
    const backfills = backfillFor(stage);
    const out = chooseGang({ ...gang, member }, machines, {
      barred: (m) => held.has(m.id) && !(backfills?.(m) ?? false),
      unavailable: (m) => held.has(m.id) || gangTaken.has(m.id),
    });
    if (out.members !== null) {
      const taken = out.members.map((c) => (member.gpuCount > 0 ? takeGpus(stage, member, c.machine, c.gpuIndices) : takeCpu(stage, member, c.machine)));
      for (const c of out.members) gangTaken.add(c.machine.id);
      placements.push({ ...taken[0]!, members: taken.map((p, rank) => ({ rank, machineId: p.machineId, gpuIndices: p.gpuIndices })) });
      return;
    }
    const verdict = { reason: out.reason, unplaceable: out.unplaceable };
    failedShapes.set(key, verdict);
    pending.push({ stageId: stage.stageId, ...verdict });
    // Without gang reservations (the simulator's other policy) it waits holding nothing.
    if (opts.gangReservations === false) return;
    // The gang starts when its last machine has room: every machine of its set waits for that.
    const starts = out.hold.map((m) => (firstReject(member, m) === null ? now : expectedStart(member, m, snapshot.heldUntil ?? [])));
    const start = starts.some((t) => t === null) ? null : Math.max(now, ...(starts as number[]));
    hold(stage, at, out.hold, () => start);
  };

  /** Every stage looked at, in the order it was, with what it asked for after its quota: preemption's input (kept only when it has running attempts to read). */
  const looked: Looked[] = [];
  const preempting = snapshot.running !== undefined;
  // A pass reads tens of thousands of heads of a few dozen shapes, whose stages share their
  // request's objects (the store reads a shape's request once): each need, and its key, is made
  // once per request (docs/throughput.md, "Placement at scale"). Needs are not changed once made.
  const needs = new Map<QueuedStage['resources'], Map<QueuedStage['placement'], StageNeed>>();
  const needOf = (stage: QueuedStage): StageNeed => {
    let byPlacement = needs.get(stage.resources);
    if (byPlacement === undefined) needs.set(stage.resources, (byPlacement = new Map()));
    let need = byPlacement.get(stage.placement);
    if (need === undefined) byPlacement.set(stage.placement, (need = stageNeed(stage)));
    return need;
  };
  const keys = new Map<StageNeed, string>();
  const keyOf = (need: StageNeed): string => {
    let key = keys.get(need);
    if (key === undefined) keys.set(need, (key = shapeKey(need)));
    return key;
  };

  /** What the last `seekCandidates` found: one object for the pass, not one per CPU stage. */
  const sought: Sought = { best: null, next: 0 };
  /** Per CPU need's key, where its next look at `cpuOnly` and `withGpus` starts (`seekCandidates`). */
  const seekFrom = new Map<string, { cpu: number; gpu: number }>();

  let at = -1;
  // Priority first; among equal priorities, the team furthest below its fair share (the ledger
  // grows with each placement below), then age (compareQueued). Ordered as walked: the walk stops
  // at the pass's last placement, about a thousand heads into tens of thousands (fairOrder).
  const nextInOrder = fairOrder(snapshot.queue, ledger, compareQueued);
  for (let stage = nextInOrder(); stage !== undefined; stage = nextInOrder()) {
    at += 1;
    if (placements.length >= maxPlacements) break;
    const gang = gangNeedOf(stage);
    if (gang !== null) {
      placeGang(stage, gang, at);
      // Its quota is asked again when it may preempt (planPreemptions): what it asked for here is its gang.
      if (preempting) looked.push({ stage, need: gang.member, gang, quotaBlocked: false });
      continue;
    }
    const team = teamOf(stage);
    // A stage that is not preemptible stays inside its team's quota; a preemptible one may borrow
    // idle capacity beyond it, which its owner reclaims by preemption when it needs it.
    // Without a quota to ask (most heads), no verdict object is made: a pass reads tens of thousands.
    const quota = stage.preemptible || !ledger.hasQuota(team) ? null : ledger.withinQuota(team, needOf(stage), machines);
    const need = quota === null ? needOf(stage) : quota.need;
    const blocked = quota === null ? null : quota.blocked;
    if (preempting) looked.push({ stage, need, gang: null, quotaBlocked: blocked !== null });
    if (blocked !== null) {
      pending.push({ stageId: stage.stageId, reason: blocked, unplaceable: quota!.never });
      continue;
    }
    const key = ledger.hasQuota(team) && !stage.preemptible ? `${keyOf(need)}|${team}` : keyOf(need);
    const known = failedShapes.get(key);
    // A stage that may backfill is looked at on its own: its shape's failure need not bind it.
    if (known !== undefined && !(heldStart.size > 0 && stage.timeoutSeconds)) {
      pending.push({ stageId: stage.stageId, reason: known.reason, unplaceable: known.unplaceable });
      if (need.allowGpuMachines) mayUseGpuMachines.push({ stage, need, at });
      continue;
    }

    const backfills = backfillFor(stage);
    if (need.gpuCount > 0) {
      // The share planner's policy picks the machine and GPUs; the scan below only says why not.
      const barred = (m: MachineView) => held.has(m.id) && !(backfills?.(m) ?? false);
      const chosen = gpuPlacer.choose(key, need, barred);
      if (chosen !== null) {
        placeGpuStage(stage, need, chosen.machine, chosen.gpuIndices);
        continue;
      }
    } else {
      // CPU work looks at GPU machines only when no GPU-less machine can take it. The best fit
      // first, from where the last look for this need found room; the rejects only when none.
      const from = seekFrom.get(key);
      const cpuAt = seekCandidates(need, cpuOnly, limit, from?.cpu ?? 0, held, backfills, sought).next;
      const gpuAt = sought.best === null ? seekCandidates(need, withGpus, limit, from?.gpu ?? 0, held, backfills, sought).next : (from?.gpu ?? 0);
      if (from === undefined) seekFrom.set(key, { cpu: cpuAt, gpu: gpuAt });
      else {
        from.cpu = cpuAt;
        from.gpu = gpuAt;
      }
      if (sought.best !== null) {
        placeCpuStage(stage, need, sought.best);
        continue;
      }
    }

    // No machine takes it now (a GPU stage: the placer found no room): the scans say why.
    const found: Scan = { candidates: [], rejects: [] };
    if (need.gpuCount > 0) scan(need, machines, Infinity, found, held, backfills);
    else {
      scan(need, cpuOnly, limit, found, held, backfills);
      scan(need, withGpus, limit, found, held, backfills);
    }
    const verdict = { reason: pendingReason(need, found.rejects), unplaceable: !found.rejects.some((r) => isBusyReason(r.reason)) };
    // A large GPU stage that must wait for busy GPUs is held a machine, so that smaller work
    // behind it cannot keep taking the GPUs it waits for (it would wait for ever).
    const r = verdict.unplaceable ? null : reservationFor(need, machines, held);
    // One stage of a shape is held a machine per pass; the others of that shape wait behind it.
    failedShapes.set(key, verdict);
    if (r) {
      hold(stage, at, [r], (m) => expectedStart(need, m, snapshot.heldUntil ?? []));
      pending.push({ stageId: stage.stageId, ...verdict });
      continue;
    }
    pending.push({ stageId: stage.stageId, ...verdict });
    if (need.allowGpuMachines) mayUseGpuMachines.push({ stage, need, at });
  }

  // A GPU placement takes its GPU's share of the machine's CPU and memory out of the reserve that
  // CPU work may not touch, so a CPU stage allowed there that waited above may fit now: a second
  // look, in the same order, at the machines where that happened.
  const freed = withGpus.filter((m) => gpusTaken.has(m.id));
  for (const { stage, need, at } of freed.length ? mayUseGpuMachines : []) {
    if (placements.length >= maxPlacements) break;
    // Its team may have reached its quota since it was first looked at.
    if (!stage.preemptible && ledger.exceeded(teamOf(stage), need, null) !== null) continue;
    const found: Scan = { candidates: [], rejects: [] };
    // Holds made for stages after this one do not bind it: it came first.
    scan(need, freed, limit, found, new Set([...heldAt].filter(([, h]) => h < at).map(([id]) => id)));
    const best = bestCandidate(need, found.candidates);
    if (best === undefined) continue;
    placeCpuStage(stage, need, best.machine);
    pending.splice(
      pending.findIndex((p) => p.stageId === stage.stageId),
      1,
    );
  }

  const preemptions = snapshot.running ? planPreemptions(snapshot, looked, pending, machines, ledger, held, reservations, gangTaken) : [];

  return { placements, pending, ...(reservations.length ? { reservations } : {}), ...(preemptions.length ? { preemptions } : {}) };
}

/** A stage the pass looked at, for preemption: its need (a gang's: one member's) and its gang. */
interface Looked {
  stage: QueuedStage;
  need: StageNeed;
  gang: GangNeed | null;
  quotaBlocked: boolean;
}

/** Moves a stage's holds (one machine, or a gang's set) to `to`, for the rest of the pass. */
function moveHold(stageId: string, to: readonly MachineView[], held: Set<string>, reservations: { stageId: string; machineId: string }[]): void {
  for (let i = reservations.length - 1; i >= 0; i--) {
    if (reservations[i]!.stageId !== stageId) continue;
    held.delete(reservations[i]!.machineId);
    reservations.splice(i, 1);
  }
  for (const m of to) {
    held.add(m.id);
    reservations.push({ stageId, machineId: m.id });
  }
}

/**
 * After the placements: each stage that waits for busy room (not one no machine could run, not
 * one at its team's quota), in the order it was looked at, may preempt (choosePreemption; a gang,
 * on all its machines at once: chooseGangPreemption), or wait for room already leaving; either
 * way the machine (a gang: its set) is held for it for the rest of the pass. A gang's preemption
 * counts once against MAX_PREEMPTIONS_PER_PASS, whatever the machines it stops work on.
 */
function planPreemptions(
  snapshot: SchedulerSnapshot,
  looked: readonly Looked[],
  pending: readonly PendingStage[],
  machines: readonly MachineView[],
  ledger: TeamLedger,
  held: Set<string>,
  reservations: { stageId: string; machineId: string }[],
  gangTaken: ReadonlySet<string>,
): PlannedPreemption[] {
  const waiting = new Map(pending.map((p) => [p.stageId, p]));
  const inputs: PreemptionInputs = {
    running: snapshot.running ?? [],
    now: snapshot.now ?? 0,
    cooldownMs: snapshot.preemptionCooldownMs ?? DEFAULT_PREEMPTION_COOLDOWN_MS,
    ledger,
    taken: new Set<string>(),
    held,
  };
  const out: PlannedPreemption[] = [];
  /** Stages that preempted in this pass (a gang once, whatever its machines). */
  let preemptors = 0;
  const take = (victims: readonly RunningAttempt[]) => {
    for (const v of victims) {
      inputs.taken.add(v.attemptId);
      ledger.add(
        v.team,
        { cpuMillis: v.cpuMillis, memoryBytes: v.memoryBytes, gpuCount: v.gpuIndices.length, gpuMilli: v.gpuMilli ?? GPU_MILLI_WHOLE, gpuType: v.gpuType },
        -1,
      );
    }
  };
  const planned = (stage: QueuedStage, m: MachineView, victims: readonly RunningAttempt[], why: string): PlannedPreemption => ({
    stageId: stage.stageId,
    machineId: m.id,
    victims: victims.map((v) => ({ attemptId: v.attemptId, token: v.token, stageId: v.stageId })),
    reason: `preempted on ${m.name} for stage ${stage.stageName} of job ${stage.jobId} (${why})`,
  });
  for (const { stage, need, gang, quotaBlocked } of looked) {
    if (preemptors >= MAX_PREEMPTIONS_PER_PASS) break;
    const p = waiting.get(stage.stageId);
    if (!p || p.unplaceable || quotaBlocked) continue;
    // Its own holds (from the pass above) do not bar it from those machines: only others' do.
    const own = new Set(reservations.filter((r) => r.stageId === stage.stageId).map((r) => r.machineId));
    const others = own.size === 0 ? inputs : { ...inputs, held: new Set([...held].filter((id) => !own.has(id))) };
    if (gang !== null) {
      // The whole gang against its team's quota, as placeGang asked it (the ledger has moved since).
      const quota = ledger.withinQuota(teamOf(stage), gangTotal(gang), machines);
      if (quota.blocked !== null) continue;
      const choice = chooseGangPreemption(
        stage,
        { ...gang, member: { ...gang.member, gpuTypes: quota.need.gpuTypes } },
        machines,
        others,
        (m) => others.held.has(m.id) || gangTaken.has(m.id),
      );
      if (choice === null) continue;
      // One hold at a time per machine (docs/gangs.md, "No deadlock"): its set replaces its earlier hold.
      moveHold(stage.stageId, choice.machines, held, reservations);
      if (choice.kind === 'wait') continue;
      preemptors += 1;
      for (const s of choice.stops) {
        take(s.victims);
        out.push(planned(stage, s.machine, s.victims, `gang of ${gang.size}, ${s.why}`));
      }
      continue;
    }
    // Only work inside its quota reclaims or preempts: borrowing takes idle room, never someone's.
    if (ledger.hasQuota(teamOf(stage)) && stage.preemptible && ledger.withinQuota(teamOf(stage), need, machines).blocked !== null) continue;
    const choice = choosePreemption(stage, need, machines, others);
    if (choice === null) continue;
    // Its hold moves to the machine it will run on (the pass may have held it another to wait on).
    moveHold(stage.stageId, [choice.machine], held, reservations);
    if (choice.kind === 'wait') continue;
    preemptors += 1;
    take(choice.victims);
    out.push(planned(stage, choice.machine, choice.victims, choice.why));
  }
  return out;
}
