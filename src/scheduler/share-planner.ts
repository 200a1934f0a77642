import { machineFragmentationUnits } from './fgd-score.js';
import { shareAllocationProblem, takeShare, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { bestChoiceOn, compareScores, compareShareMachines, type ShareChoice, type ShareContext, type SharePolicyName } from './share-policies.js';

/** Where a request went: a machine and, for GPU requests, the GPU indices it took. */
export interface SharePlacement {
  machineId: string;
  gpuIndices: number[];
}

/**
 * `chooseShare`, incrementally, over a working copy of the machines it places on. A machine's
 * scores depend on that machine alone, and a placement changes one machine, so the planner keeps,
 * per machine, its best choice for each request shape it was asked about (and, for FGD, F(m) now)
 * and forgets them when that machine changes. Same answers as `chooseShare`, at the cost of the
 * machines that changed (docs/scheduling.md, "Cost"). Pure: no clock, no randomness.
 */
export class SharePlanner {
  private readonly machines: ShareMachine[];
  private readonly byId = new Map<string, number>();
  /** F(m) now in whole units, per machine (FGD only). */
  private readonly before: (number | undefined)[];
  /** Per machine, by request shape id: its best choice (null: does not fit), or undefined when not known. */
  private readonly best: (ShareChoice | null | undefined)[][];
  private readonly shapeIds = new Map<string, number>();

  constructor(
    machines: readonly ShareMachine[],
    private readonly policy: SharePolicyName,
    private readonly ctx: ShareContext,
  ) {
    this.machines = machines.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) })).sort(compareShareMachines);
    this.machines.forEach((m, i) => this.byId.set(m.id, i));
    this.before = this.machines.map(() => undefined);
    this.best = this.machines.map(() => []);
  }

  private shapeId(r: ShareRequest): number {
    const key = `${r.cpuMillis}|${r.memoryBytes}|${r.gpuCount}|${r.gpuMilli}|${r.gpuTypes.join(',')}`;
    let id = this.shapeIds.get(key);
    if (id === undefined) {
      id = this.shapeIds.size;
      this.shapeIds.set(key, id);
    }
    return id;
  }

  private bestOn(i: number, shape: number, r: ShareRequest): ShareChoice | null {
    const known = this.best[i]![shape];
    if (known !== undefined) return known;
    const m = this.machines[i]!;
    let before: number | undefined;
    if (this.policy === 'fgd') before = this.before[i] ??= machineFragmentationUnits(m, this.ctx.workload);
    const choice = bestChoiceOn(this.policy, m, r, this.ctx, before);
    this.best[i]![shape] = choice;
    return choice;
  }

  /** Where the request would go now (not taken); null when it fits nowhere. */
  choose(r: ShareRequest): SharePlacement | null {
    const shape = this.shapeId(r);
    let at = -1;
    let choice: ShareChoice | null = null;
    // Machines are in name order, so the first of equal scores is the tie-break's winner.
    for (let i = 0; i < this.machines.length; i++) {
      const c = this.bestOn(i, shape, r);
      if (c !== null && (choice === null || compareScores(c.score, choice.score) < 0)) {
        choice = c;
        at = i;
      }
    }
    return choice === null ? null : { machineId: this.machines[at]!.id, gpuIndices: [...choice.gpuIndices] };
  }

  /** Chooses and takes; null when it fits nowhere. */
  place(r: ShareRequest): SharePlacement | null {
    const p = this.choose(r);
    if (p === null) return null;
    this.take(r, p);
    return p;
  }

  /** Takes a placement (from `choose`, or decided elsewhere), re-checked first: throws when it does not fit. */
  take(r: ShareRequest, p: SharePlacement): void {
    const i = this.byId.get(p.machineId);
    if (i === undefined) throw new Error(`no machine ${p.machineId}`);
    const m = this.machines[i]!;
    const problem = shareAllocationProblem(m, r, p.gpuIndices);
    if (problem !== null) throw new Error(`cannot place on ${m.id}: ${problem}`);
    takeShare(m, r, p.gpuIndices);
    this.before[i] = undefined;
    this.best[i] = [];
  }

  /** The planner's machines now (read-only use: for checks and figures). */
  view(): readonly ShareMachine[] {
    return this.machines;
  }
}
