import { ChoiceTree } from './choice-tree.js';
import { sortIfNeeded } from './sorted.js';
import { Alike, mix } from './alike.js';
import { machineFragmentationUnits } from './fgd-score.js';
import { acceptsShareType, gpuChoices, shareAllocationProblem, takeShare, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { idHash, randomDrawBase, randomMachineWord } from './random-score.js';
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
 * machines that changed (docs/scheduling.md, "Cost"). Pure: no clock, no Math.random. It keeps
 * every machine state it scored: one planner serves one pass or one replay, not a server's life.
 * Random's scores change with every draw: for it the planner keeps only which machines fit, and
 * the n-th choice it makes is `chooseShare`'s with `draw` n (from the context's `draw`, default 0).
 */
export class SharePlanner {
  private readonly machines: ShareMachine[];
  private readonly byId = new Map<string, number>();
  /** F(m) now in whole units, per machine (FGD only). */
  private readonly before: (number | undefined)[];
  /**
   * By request shape id, per machine: its best choice (null: does not fit), or undefined when not
   * known. Shape-major and dense (filled when a shape is first seen), so the scan over machines
   * reads one packed array; a placement clears its machine's column.
   */
  private readonly best: (ShareChoice | null | undefined)[][] = [];
  private readonly shapeIds = new Map<string, number>();
  /**
   * Best choices by machine state, by request shape: machines in the same state (idle ones of a
   * model, at first most of them) get the same choice and score, so each is computed once. A
   * machine's name is not in its score, only in ties, which `choose` breaks by the scan's order.
   */
  private readonly byState = new Map<string, Map<number, ShareChoice | null>>();
  /** Per machine, its state's entry of `byState`, or undefined after a change. */
  private readonly stateRows: (Map<number, ShareChoice | null> | undefined)[];
  /** `chooseWhere`'s trees, by request shape and the caller's filter key; each forgets a machine when it changes. */
  private readonly trees = new Map<string, ChoiceTree>();
  /** Random: the next draw, and each machine's `idHash`. */
  private draw: number;
  private readonly idHashes: number[];
  /** `chooseInGroups`' machines grouped by class and state, built on its first call and kept by `take`. */
  private grouping: Grouping | null = null;

  constructor(
    machines: readonly ShareMachine[],
    private readonly policy: SharePolicyName,
    private readonly ctx: ShareContext,
    /** The machines are the caller's own copies, which it hands over (it changes them no more): not copied again. */
    handedOver = false,
    /**
     * The caller's machines are in `compareShareMachines`' order (name, then id) already, as the
     * server's pass sorts them (`compareMachines`, the same rule): not compared again, 7,000 names
     * a pass (docs/throughput.md, "Placement at scale").
     */
    inOrder = false,
  ) {
    const own = handedOver ? machines.slice() : machines.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) }));
    this.machines = inOrder ? own : sortIfNeeded(own, compareShareMachines);
    this.machines.forEach((m, i) => this.byId.set(m.id, i));
    this.before = this.machines.map(() => undefined);
    this.stateRows = this.machines.map(() => undefined);
    this.draw = ctx.draw ?? 0;
    this.idHashes = policy === 'random' ? this.machines.map((m) => idHash(m.id)) : [];
  }

  /**
   * The request's shape: requests alike in every field the scores read share one. A caller that
   * asks for one request many times (the server's pass: once per GPU stage) may keep it and give
   * it to `chooseWhere` and `chooseInGroups`, which otherwise work it out each call.
   */
  shapeOf(r: ShareRequest): number {
    return this.shapeId(r);
  }

  private shapeId(r: ShareRequest): number {
    const key = `${r.cpuMillis}|${r.memoryBytes}|${r.gpuCount}|${r.gpuMilli}|${r.gpuTypes.join(',')}|${r.gpuMemoryBytes ?? ''}`;
    let id = this.shapeIds.get(key);
    if (id === undefined) {
      id = this.shapeIds.size;
      this.shapeIds.set(key, id);
      this.best.push(new Array<ShareChoice | null | undefined>(this.machines.length).fill(undefined));
    }
    return id;
  }

  private bestOn(i: number, shape: number, byMachine: (ShareChoice | null | undefined)[], r: ShareRequest): ShareChoice | null {
    const known = byMachine[i];
    if (known !== undefined) return known;
    const m = this.machines[i]!;
    // A machine with no room for it at all needs no state key nor score (on a busy cluster, most).
    if (!mayFit(m, r)) return (byMachine[i] = null);
    let row = this.stateRows[i];
    if (row === undefined) {
      const key = stateKey(m, this.policy === 'clustering');
      row = this.byState.get(key);
      if (row === undefined) this.byState.set(key, (row = new Map()));
      this.stateRows[i] = row;
    }
    let choice = row.get(shape);
    if (choice === undefined) {
      if (this.policy === 'random') {
        // Only whether it fits is kept (a choice scored 0): random's scores are drawn in `chooseRandom`.
        const fits = gpuChoices(m, r)[0];
        choice = fits === undefined ? null : { gpuIndices: fits, score: [0, 0] };
      } else {
        let before: number | undefined;
        if (this.policy === 'fgd' || this.policy === 'fgd-paper') before = this.before[i] ??= machineFragmentationUnits(m, this.ctx.workload);
        choice = bestChoiceOn(this.policy, m, r, this.ctx, before);
      }
      row.set(shape, choice);
    }
    byMachine[i] = choice;
    return choice;
  }

  /**
   * Where the request would go now (not taken); null when it fits nowhere. `eligible`, by the
   * planner's machine index (`indexOf`), narrows the machines looked at: the server's pass leaves
   * out machines another rule rejects (region, labels, health, a hold), with the same scores.
   */
  choose(r: ShareRequest, eligible?: (i: number) => boolean): SharePlacement | null {
    if (this.policy === 'random') return this.chooseRandom(r, eligible);
    const shape = this.shapeId(r);
    const byMachine = this.best[shape]!;
    let at = -1;
    let choice: ShareChoice | null = null;
    // Machines are in name order, so the first of equal scores is the tie-break's winner.
    for (let i = 0; i < this.machines.length; i++) {
      const c = this.bestOn(i, shape, byMachine, r);
      // Eligibility is asked only of a machine that would win so far: the same answer, and on a
      // large cluster few machines are asked (most have no room, or a score no better).
      if (c !== null && (choice === null || compareScores(c.score, choice.score) < 0) && (eligible === undefined || eligible(i))) {
        choice = c;
        at = i;
      }
    }
    return choice === null ? null : { machineId: this.machines[at]!.id, gpuIndices: [...choice.gpuIndices] };
  }

  /**
   * `choose` with `eligible` split in two, for a caller that asks many times in a pass (the
   * server's, docs/throughput.md "Placement at scale"): `allowed`, which must answer the same for
   * the same `filterKey` for the planner's life (the static rules of a need), and `barred`, asked
   * anew of each would-be winner (a hold made since). The same answer as `choose` with
   * `i => allowed(i) && !barred(i)`, from a tree per shape and key (`ChoiceTree`) that recomputes
   * only the machines changed since, in O(log n) each, rather than a read of every machine.
   */
  chooseWhere(
    r: ShareRequest,
    filterKey: string,
    allowed: (i: number) => boolean,
    barred: (i: number) => boolean,
    /** `shapeOf(r)`, where the caller kept it. */
    shape: number = this.shapeId(r),
  ): SharePlacement | null {
    if (this.policy === 'random') return this.chooseRandom(r, (i) => allowed(i) && !barred(i));
    const byMachine = this.best[shape]!;
    const key = `${shape}|${filterKey}`;
    let tree = this.trees.get(key);
    if (tree === undefined) {
      // Over the allowed machines only: a need of one GPU model has a tree of that model's machines.
      const slots: number[] = [];
      for (let i = 0; i < this.machines.length; i++) if (allowed(i)) slots.push(i);
      tree = new ChoiceTree(Int32Array.from(slots), (i) => this.bestOn(i, shape, byMachine, r)?.score ?? null);
      this.trees.set(key, tree);
    }
    // A barred winner is left out and the next best asked, then put back: holds are few.
    let at = tree.best();
    const left: number[] = [];
    while (at >= 0 && barred(at)) {
      tree.exclude(at);
      left.push(at);
      at = tree.best();
    }
    for (const i of left) tree.include(i);
    if (at < 0) return null;
    return { machineId: this.machines[at]!.id, gpuIndices: [...this.bestOn(at, shape, byMachine, r)!.gpuIndices] };
  }

  /**
   * `chooseWhere` for a filter that is a class's (`allowedClass` of the machine's class in
   * `classOf`, asked of each class, answering the same for the planner's life), over machines
   * grouped by class and state rather than one by one: machines alike in both have the same best
   * choice and score, so a choice costs one look per group (a cluster of 10,000 machines of a few
   * kinds has a few hundred, docs/throughput.md "Placement at scale"), the winner being the lowest
   * score, then the lowest machine index that is not `barred`. The same answer as `chooseWhere`
   * with `i => allowedClass(classOf[i])`. `classOf` is by the planner's machine index and the same
   * on every call (the first call's is kept).
   */
  chooseInGroups(
    r: ShareRequest,
    classOf: Int32Array,
    allowedClass: (c: number) => boolean,
    barred: (i: number) => boolean,
    /** Names `allowedClass`, as `chooseWhere`'s does: the groups it allows are then kept under it, and each is asked of it once. */
    filterKey?: string,
    /** `shapeOf(r)`, where the caller kept it. */
    shape: number = this.shapeId(r),
  ): SharePlacement | null {
    if (this.policy === 'random') return this.chooseRandom(r, (i) => allowedClass(classOf[i]!) && !barred(i));
    const grouping = (this.grouping ??= this.groupBy(classOf));
    let best: ShareChoice | null = null;
    let at = -1;
    for (const g of filterKey === undefined ? grouping.groups : this.allowedGroups(grouping, filterKey, allowedClass)) {
      if (g.members.length === 0) continue;
      if (filterKey === undefined && !allowedClass(g.cls)) continue;
      const c = this.groupChoice(g, shape, r);
      if (c === null) continue;
      const by = best === null ? -1 : compareScores(c.score, best.score);
      // Worse, or as good from a group whose first machine comes after the winner: it cannot win.
      if (by > 0 || (by === 0 && g.members[0]! > at)) continue;
      const i = firstNotBarred(g.members, barred);
      if (i < 0 || (by === 0 && i > at)) continue;
      best = c;
      at = i;
    }
    return best === null ? null : { machineId: this.machines[at]!.id, gpuIndices: [...best.gpuIndices] };
  }

  /**
   * The groups whose class `allowedClass` allows, in the order made, kept per filter key: a group's
   * class never changes, so only the groups made since the key's last call are asked. Emptied
   * groups stay (a machine may come back to their state) and are passed over by the caller. A pass
   * at 10,000 machines has some 300 groups, and a need of one GPU model a few dozen of them.
   */
  private allowedGroups(grouping: Grouping, filterKey: string, allowedClass: (c: number) => boolean): readonly Group[] {
    let allowed = grouping.allowed.get(filterKey);
    if (allowed === undefined) grouping.allowed.set(filterKey, (allowed = { asked: 0, groups: [] }));
    for (; allowed.asked < grouping.groups.length; allowed.asked++) {
      const g = grouping.groups[allowed.asked]!;
      if (allowedClass(g.cls)) allowed.groups.push(g);
    }
    return allowed.groups;
  }

  private groupBy(classOf: Int32Array): Grouping {
    const clustering = this.policy === 'clustering';
    const grouping: Grouping = {
      groups: [],
      alike: new Alike(
        (x) => stateHash(x.m, x.cls),
        (a, b) => a.cls === b.cls && sameState(a.m, b.m, clustering),
      ),
      groupOf: new Int32Array(this.machines.length),
      classOf,
      allowed: new Map(),
      probe: { cls: 0, m: this.machines[0]! },
    };
    for (let i = 0; i < this.machines.length; i++) this.joinGroup(grouping, i, false);
    return grouping;
  }

  /** Puts machine `i` in the group of its class and state now; `sorted`: among the members in index order (after a change; the first build appends in order). */
  private joinGroup(grouping: Grouping, i: number, sorted: boolean): void {
    // A group keeps a copy of its state: its machines change and leave it. The machine is asked
    // about through one probe object, not one made per machine (7,000 a pass): `keep` copies it.
    const probe = grouping.probe;
    probe.cls = grouping.classOf[i]!;
    probe.m = this.machines[i]!;
    const id = grouping.alike.groupOf(probe, (x) => ({
      cls: x.cls,
      m: { ...x.m, gpus: x.m.gpus.map((g) => ({ ...g })) },
    }));
    if (id === grouping.groups.length) grouping.groups.push({ cls: grouping.classOf[i]!, members: [], choices: [] });
    const members = grouping.groups[id]!.members;
    if (sorted) members.splice(lowerBound(members, i), 0, i);
    else members.push(i);
    grouping.groupOf[i] = id;
  }

  /** The best choice on a group's machines (all alike), computed on its first member once per request shape. */
  private groupChoice(g: Group, shape: number, r: ShareRequest): ShareChoice | null {
    let c = g.choices[shape];
    if (c === undefined) {
      const i = g.members[0]!;
      // The per-machine cache holds it when that machine was asked (or the state was, elsewhere).
      c = this.bestOn(i, shape, this.best[shape]!, r);
      g.choices[shape] = c;
    }
    return c;
  }

  /**
   * Random: the fitting machine with the lowest key for this draw (name order for equal keys), then
   * its GPU by `bestChoiceOn` with the draw: as `chooseShare` with the context's `draw` set to it.
   */
  private chooseRandom(r: ShareRequest, eligible?: (i: number) => boolean): SharePlacement | null {
    const shape = this.shapeId(r);
    const byMachine = this.best[shape]!;
    const ctx = { ...this.ctx, draw: this.draw++ };
    const base = randomDrawBase(ctx.seed ?? 0, ctx.draw);
    let at = -1;
    let choice: ShareChoice | null = null;
    let bestWord = 0;
    for (let i = 0; i < this.machines.length; i++) {
      if (this.bestOn(i, shape, byMachine, r) === null) continue;
      // Only a machine whose key is as low as the best so far can win: score it in full (rare).
      const word = randomMachineWord(base, this.idHashes[i]!);
      if (choice !== null && word > bestWord) continue;
      if (eligible !== undefined && !eligible(i)) continue;
      const c = bestChoiceOn('random', this.machines[i]!, r, ctx);
      if (c !== null && (choice === null || compareScores(c.score, choice.score) < 0)) {
        choice = c;
        at = i;
        bestWord = word;
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
    this.stateRows[i] = undefined;
    for (const byMachine of this.best) byMachine[i] = undefined;
    for (const tree of this.trees.values()) tree.forget(i);
    const grouping = this.grouping;
    if (grouping !== null) {
      const members = grouping.groups[grouping.groupOf[i]!]!.members;
      members.splice(lowerBound(members, i), 1);
      this.joinGroup(grouping, i, true);
    }
  }

  /** The machine's index in the planner's order (name, then id), or undefined when it has none by that id. */
  indexOf(machineId: string): number | undefined {
    return this.byId.get(machineId);
  }

  /** The planner's machines now (read-only use: for checks and figures). */
  view(): readonly ShareMachine[] {
    return this.machines;
  }
}

/** A quick necessary condition of `gpuChoices` being non-empty: CPU, memory, and enough GPUs of acceptable types with its thousandths free. */
function mayFit(m: ShareMachine, r: ShareRequest): boolean {
  if (r.cpuMillis > m.cpuMillisFree || r.memoryBytes > m.memoryBytesFree) return false;
  if (r.gpuCount === 0) return true;
  let n = 0;
  for (const g of m.gpus) if (g.freeMilli >= r.gpuMilli && acceptsShareType(r, g.type)) n += 1;
  return n >= r.gpuCount;
}

/**
 * What a machine's scores depend on: free CPU and memory, each GPU's index, type, room and memory
 * (totals are fixed per state too); for clustering, the kinds of GPU request on it too.
 */
function stateKey(m: ShareMachine, classes: boolean): string {
  let key = `${m.cpuMillisTotal}/${m.cpuMillisFree}/${m.memoryBytesFree}/${m.gpus.length}`;
  for (const g of m.gpus) key += `|${g.index}:${g.type}:${g.freeMilli}:${g.memoryBytesTotal ?? ''}:${g.memoryBytesFree ?? ''}`;
  if (classes && m.gpuClasses !== undefined) {
    for (const k of Object.keys(m.gpuClasses).sort()) if (m.gpuClasses[k]! > 0) key += `|${k}`;
  }
  return key;
}

/** Machines alike in class and state (`chooseInGroups`): their members by index, ascending, and their best choice per request shape. */
interface Group {
  cls: number;
  members: number[];
  choices: (ShareChoice | null | undefined)[];
}

interface Grouping {
  groups: Group[];
  alike: Alike<{ cls: number; m: ShareMachine }>;
  /** Per machine, its group. */
  groupOf: Int32Array;
  classOf: Int32Array;
  /** By `chooseInGroups`' filter key: how many groups were asked (in the order made), and those allowed. */
  allowed: Map<string, { asked: number; groups: Group[] }>;
  /** `joinGroup`'s question to `alike`, refilled for each machine (never kept: `alike` keeps a copy). */
  probe: { cls: number; m: ShareMachine };
}

/** `stateKey`'s fields, hashed (with the machine's class). */
function stateHash(m: ShareMachine, cls: number): number {
  let h = mix(mix(mix(mix(cls, m.cpuMillisTotal), m.cpuMillisFree), m.memoryBytesFree), m.gpus.length);
  for (const g of m.gpus) h = mix(mix(mix(h, g.index), g.freeMilli), g.memoryBytesFree ?? -1);
  return h;
}

/** Whether two machines have equal `stateKey`s (for clustering, with the kinds of GPU request on them), without making them. */
function sameState(a: ShareMachine, b: ShareMachine, classes: boolean): boolean {
  if (
    a.cpuMillisTotal !== b.cpuMillisTotal ||
    a.cpuMillisFree !== b.cpuMillisFree ||
    a.memoryBytesFree !== b.memoryBytesFree ||
    a.gpus.length !== b.gpus.length
  )
    return false;
  for (let k = 0; k < a.gpus.length; k++) {
    const x = a.gpus[k]!;
    const y = b.gpus[k]!;
    if (
      x.index !== y.index ||
      x.type !== y.type ||
      x.freeMilli !== y.freeMilli ||
      (x.memoryBytesTotal ?? null) !== (y.memoryBytesTotal ?? null) ||
      (x.memoryBytesFree ?? null) !== (y.memoryBytesFree ?? null)
    )
      return false;
  }
  if (!classes) return true;
  const kinds = (m: ShareMachine) =>
    Object.keys(m.gpuClasses ?? {})
      .filter((k) => m.gpuClasses![k]! > 0)
      .sort()
      .join('|');
  return kinds(a) === kinds(b);
}

/** The first position in the ascending `xs` whose value is at least `x`. */
function lowerBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The first of the ascending members that is not barred, or -1. */
function firstNotBarred(members: readonly number[], barred: (i: number) => boolean): number {
  for (const i of members) if (!barred(i)) return i;
  return -1;
}
