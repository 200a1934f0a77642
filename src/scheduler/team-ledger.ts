import { DEFAULT_TEAM } from '../domain/job-definition.js';
import { normalizeGpuType } from '../domain/resources.js';
import {
  addUsage,
  dominantShare,
  emptyTeamUsage,
  isBorrowing,
  quotaExceeded,
  quotaNeverFits,
  type QuotaBlock,
  type TeamQuota,
  type TeamUsage,
} from '../domain/team.js';
import { acceptsGpuType, type StageNeed } from './checks.js';
import { MergedRuns } from './merged-runs.js';
import type { MachineView, QueuedStage, TeamView } from './snapshot.js';

/** A stage's team; a snapshot without teams (tests, tools) means the default team. */
export const teamOf = (s: { team?: string }): string => s.team ?? DEFAULT_TEAM;

interface Entry {
  weight: number;
  quota: TeamQuota;
  usage: TeamUsage;
}

/**
 * What each team holds during one pass, starting from the snapshot's usage and growing with each
 * placement: the pass's fair-share order and quota checks read it (docs/scheduling.md, "Teams,
 * quotas and fair share"). A team the snapshot does not list has weight 1, no quota, and holds
 * what this pass gave it.
 */
export class TeamLedger {
  private readonly teams = new Map<string, Entry>();
  /** The cluster's capacity (machines that take work): the denominator of every share. */
  readonly total: TeamUsage = emptyTeamUsage();

  constructor(teams: readonly TeamView[] | undefined, machines: readonly MachineView[]) {
    for (const t of teams ?? []) {
      this.teams.set(t.name, { weight: t.weight, quota: t.quota, usage: { ...t.usage, gpus: { ...t.usage.gpus } } });
    }
    for (const m of machines) {
      this.total.cpuMillis += m.cpuMillisTotal;
      this.total.memoryBytes += m.memoryBytesTotal;
      // A run of GPUs of one model (most machines: all of them) is normalised and counted once.
      for (let k = 0; k < m.gpus.length;) {
        const raw = m.gpus[k]!.type;
        let n = 0;
        while (k < m.gpus.length && m.gpus[k]!.type === raw) {
          n += 1;
          k += 1;
        }
        const t = normalizeGpuType(raw);
        this.total.gpus[t] = (this.total.gpus[t] ?? 0) + n;
      }
    }
  }

  private entry(team: string): Entry {
    let e = this.teams.get(team);
    if (!e) {
      e = { weight: 1, quota: {}, usage: emptyTeamUsage() };
      this.teams.set(team, e);
    }
    return e;
  }

  usage(team: string): Readonly<TeamUsage> {
    return this.entry(team).usage;
  }

  quota(team: string): TeamQuota {
    return this.entry(team).quota;
  }

  /** Each team's `share` since its last `add`: the fair order asks it for every stage it yields (tens of thousands a pass). */
  private readonly shares = new Map<string, number>();

  /** Dominant share over weight, lower first. */
  share(team: string): number {
    let s = this.shares.get(team);
    if (s === undefined) {
      const e = this.entry(team);
      this.shares.set(team, (s = dominantShare(e.usage, e.weight, this.total)));
    }
    return s;
  }

  hasQuota(team: string): boolean {
    const q = this.entry(team).quota;
    return q.cpuMillis !== undefined || q.memoryBytes !== undefined || Object.keys(q.gpus ?? {}).length > 0;
  }

  /** Why placing this request would take the team past its quota, or null. */
  exceeded(team: string, need: { cpuMillis: number; memoryBytes: number; gpuCount: number; gpuMilli?: number }, gpuType: string | null): QuotaBlock | null {
    const e = this.entry(team);
    return quotaExceeded(team, e.quota, e.usage, need, gpuType);
  }

  borrowing(team: string): boolean {
    const e = this.entry(team);
    return isBorrowing(e.quota, e.usage);
  }

  /** A placement (sign 1) or a victim's release (-1); GPUs in thousandths (`gpuMilli` each, absent: whole). */
  add(team: string, a: { cpuMillis: number; memoryBytes: number; gpuCount: number; gpuMilli?: number; gpuType: string | null }, sign: 1 | -1 = 1): void {
    addUsage(this.entry(team).usage, a, sign);
    this.shares.delete(team);
  }

  /**
   * The stage's need narrowed to what its team's quota leaves room for: GPU types whose quota the
   * stage would exceed are taken out of its acceptable types. `blocked` (the quota line) when
   * nothing is left: CPU or memory over quota, or every acceptable GPU type; `never` when each of
   * those blocks is the stage alone being more than the whole quota (the line then says so, and
   * waiting will not help).
   */
  withinQuota(team: string, need: StageNeed, machines: readonly MachineView[]): { need: StageNeed; blocked: string | null; never: boolean } {
    if (!this.hasQuota(team)) return { need, blocked: null, never: false };
    const base = this.exceeded(team, { ...need, gpuCount: 0 }, null);
    if (base) return { need, blocked: base.message, never: base.never };
    if (need.gpuCount === 0) return { need, blocked: null, never: false };
    const types = new Set<string>();
    for (const m of machines) for (const g of m.gpus) if (acceptsGpuType(need, g.type)) types.add(normalizeGpuType(g.type));
    const allowed: string[] = [];
    // The line shown is that of a type the stage could get by waiting, if there is one.
    let first: QuotaBlock | null = null;
    for (const t of [...types].sort()) {
      const why = this.exceeded(team, need, t);
      if (why === null) allowed.push(t);
      else if (first === null || (first.never && !why.never)) first = why;
    }
    if (allowed.length === types.size) return { need, blocked: null, never: false };
    if (allowed.length === 0) return { need, blocked: first!.message, never: first!.never };
    return { need: { ...need, gpuTypes: allowed }, blocked: null, never: false };
  }

  /**
   * Why the stage, if not preemptible, could never run within its team's whole quota (usage
   * aside), or null: CPU or memory over the quota, or more GPUs than the quota of every type it
   * accepts (the types it names, else those of these machines; with neither, nothing is judged).
   * What a submit is warned with (`?strict=true`: refused), as for machines (never-placeable.ts).
   */
  neverWithinQuota(team: string, need: StageNeed, machines: readonly MachineView[]): string | null {
    if (!this.hasQuota(team)) return null;
    const q = this.quota(team);
    const base = quotaNeverFits(team, q, { ...need, gpuCount: 0 }, null);
    if (base) return base;
    if (need.gpuCount === 0) return null;
    const types = new Set(need.gpuTypes.map(normalizeGpuType));
    if (types.size === 0) for (const m of machines) for (const g of m.gpus) types.add(normalizeGpuType(g.type));
    let first: string | null = null;
    for (const t of [...types].sort()) {
      const why = quotaNeverFits(team, q, need, t);
      if (why === null) return null;
      first ??= why;
    }
    return first;
  }
}

/**
 * The fair-share order over the queued stages: at each step, of each team's next stage (by
 * `compare`: priority, then age), the one of highest priority; among equal priorities, the team of
 * the lowest dominant share over weight now (the ledger grows as the caller places); then `compare`.
 * A team's own stages keep `compare`'s order. O(teams) a step. Returns the step: each call gives the
 * next stage (decided then, from the ledger as it is then), undefined after the last. A step
 * function, not a generator: a pass takes thousands of steps, and a generator's result object and
 * a best-so-far object per step were garbage each (docs/throughput.md, "Placement at scale").
 *
 * The stages may come in any order; nothing is sorted up front. Each team's stages are merged
 * lazily from the runs in order that the input holds (`MergedRuns`): the server reads each shape's
 * heads in queue order, a run each, and the pass walks about a thousand of the tens of thousands
 * it read. `compare` must be a total preorder (`compareQueued` is), for the order to be the one a
 * sort would give.
 */
export function fairOrder(
  stages: readonly QueuedStage[],
  ledger: TeamLedger,
  compare: (a: QueuedStage, b: QueuedStage) => number,
): () => QueuedStage | undefined {
  const laneOf = new Map<string, MergedRuns<QueuedStage>>();
  // One read of each stage: a run goes on while the team is the same and the order holds.
  let lastTeam: string | null = null;
  let lane: MergedRuns<QueuedStage> | undefined;
  let start = 0;
  for (let i = 0; i < stages.length; i++) {
    const s = stages[i]!;
    const t = teamOf(s);
    if (t === lastTeam && compare(stages[i - 1]!, s) <= 0) continue;
    lane?.addRun(start, i);
    start = i;
    lastTeam = t;
    lane = laneOf.get(t);
    if (lane === undefined) laneOf.set(t, (lane = new MergedRuns(stages, compare)));
  }
  lane?.addRun(start, stages.length);
  // Teams in the order of their first stage in `compare`'s order, as a sort of the whole queue
  // would meet them (a tie between two teams' first stages, by their place in the input).
  const lanes = [...laneOf.entries()].map(([team, l]) => ({ team, l: l.seal() }));
  lanes.sort((a, b) => compare(a.l.peek()!, b.l.peek()!) || a.l.peekPosition() - b.l.peekPosition());
  const teams = lanes.map((x) => x.team);
  const merged = lanes.map((x) => x.l);
  if (merged.length <= 1) {
    const only = merged[0];
    return () => only?.take();
  }
  return () => {
    let best = -1;
    let bestStage: QueuedStage | undefined;
    let bestShare = 0;
    for (let k = 0; k < merged.length; k++) {
      const stage = merged[k]!.peek();
      if (stage === undefined) continue;
      if (bestStage === undefined || stage.priority > bestStage.priority) {
        best = k;
        bestStage = stage;
        bestShare = ledger.share(teams[k]!);
        continue;
      }
      if (stage.priority < bestStage.priority) continue;
      const share = ledger.share(teams[k]!);
      if (share < bestShare || (share === bestShare && compare(stage, bestStage) < 0)) {
        best = k;
        bestStage = stage;
        bestShare = share;
      }
    }
    if (best >= 0) merged[best]!.take();
    return bestStage;
  };
}
