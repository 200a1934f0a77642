import { Alike, mix, mixText } from './alike.js';
import { checkLabels, checkTakesWork, fitChecks, type StageNeed } from './checks.js';
import { needKey } from './need-key.js';
import type { MachineView } from './snapshot.js';

/** The static checks but the labels': machines are grouped without their labels (racks would make a group of each few machines), which are checked per machine, and only for a need that names some. */
const GROUP_CHECKS = [checkTakesWork, ...fitChecks.filter((c) => c !== checkLabels)];

/**
 * What the static checks but the labels' (health, service, region, GPU models, counts and memory,
 * CPU and memory in all) read of a machine, hashed. Machines alike in it (`staticallyAlike`) pass
 * or fail them alike for any need: a cluster of 10,000 machines has a few dozen groups
 * (docs/throughput.md, "Placement at scale").
 */
function staticHash(m: MachineView): number {
  let h = mixText(mixText(mixText(0, m.health), m.scheduling), m.region ?? '');
  h = mix(mix(mix(h, m.cpuMillisTotal), m.memoryBytesTotal), m.gpus.length);
  // Most machines have GPUs of one model and size: the first says it.
  const g0 = m.gpus[0];
  return g0 === undefined ? h : mix(mixText(h, g0.type), g0.memoryBytesTotal ?? -1);
}

function staticallyAlike(a: MachineView, b: MachineView): boolean {
  if (
    a.health !== b.health ||
    a.scheduling !== b.scheduling ||
    (a.region ?? null) !== (b.region ?? null) ||
    a.cpuMillisTotal !== b.cpuMillisTotal ||
    a.memoryBytesTotal !== b.memoryBytesTotal ||
    a.gpus.length !== b.gpus.length
  )
    return false;
  for (let k = 0; k < a.gpus.length; k++) {
    const x = a.gpus[k]!;
    const y = b.gpus[k]!;
    if (x.type !== y.type || (x.memoryBytesTotal ?? null) !== (y.memoryBytesTotal ?? null)) return false;
  }
  return true;
}

/**
 * A pass's machines grouped by what the static checks read of them, so that "which machines could
 * ever run this need" costs one run of the checks per group and a table lookup per machine, not
 * the checks per machine per shape. Built from the machines as they are: a change of a machine's
 * health, labels or GPUs needs a new one (the server builds one per pass, from its read).
 */
export class StaticClasses {
  /** Per machine (in the order given), its group. */
  readonly classOf: Int32Array;
  /** One machine of each group: the checks run on it for the whole group. */
  private readonly representatives: MachineView[];
  /** Per need key, per group: 1 passes the static checks, 2 fails, 0 not asked yet. */
  private readonly verdicts = new Map<string, Uint8Array>();

  constructor(
    private readonly machines: readonly MachineView[],
    /** `subset`'s: the groups of another, for these machines. */
    of?: { classOf: Int32Array; parent: StaticClasses },
  ) {
    if (of !== undefined) {
      this.classOf = of.classOf;
      this.representatives = of.parent.representatives;
      this.verdicts = of.parent.verdicts;
      return;
    }
    this.classOf = new Int32Array(machines.length);
    // Grouped by what the checks read, with the machines as they are (those fields do not change in a pass).
    const alike = new Alike(staticHash, staticallyAlike);
    for (let i = 0; i < machines.length; i++) this.classOf[i] = alike.groupOf(machines[i]!);
    this.representatives = alike.representatives;
  }

  /**
   * The same groups (and the verdicts known so far, shared from now on) for `machines`, machine
   * `k` of which stands for this one's machine `indices[k]` (a copy of it in the same state: the
   * planner's working copies, in its order). What the server's pass grouped for the shapes'
   * depths serves its planner too (docs/throughput.md, "Placement at scale").
   */
  subset(machines: readonly MachineView[], indices: readonly number[]): StaticClasses {
    if (machines.length !== indices.length) throw new Error(`static classes: ${machines.length} machines for ${indices.length} indices`);
    // A loop, not Int32Array.from with a mapping function (the iterator protocol per element, 7,000 a pass).
    const classOf = new Int32Array(indices.length);
    for (let k = 0; k < indices.length; k++) classOf[k] = this.classOf[indices[k]!]!;
    return new StaticClasses(machines, { classOf, parent: this });
  }

  /** How many machines it groups. */
  get size(): number {
    return this.classOf.length;
  }

  /**
   * Whether the machines of group `c` (`classOf`) pass every static check for the need but the
   * labels' (`key` names it): the checks run once per group. For a need that names no labels, the
   * whole verdict.
   */
  classPasses(need: StageNeed, key: string = needKey(need)): (c: number) => boolean {
    const verdicts = this.verdictsOf(key);
    return (c) => {
      if (verdicts[c] === 0) verdicts[c] = GROUP_CHECKS.every((check) => check(need, this.representatives[c]!) === null) ? 1 : 2;
      return verdicts[c] === 1;
    };
  }

  private verdictsOf(key: string): Uint8Array {
    let v = this.verdicts.get(key);
    if (v === undefined) this.verdicts.set(key, (v = new Uint8Array(this.representatives.length)));
    return v;
  }

  /** Whether machine `i` (in the order given) passes every static check for the need (`key` names it: `needKey` or finer): the checks run once per group. */
  passesFor(need: StageNeed, key: string = needKey(need)): (i: number) => boolean {
    const verdicts = this.verdictsOf(key);
    const labels = Object.keys(need.labels).length > 0;
    return (i) => {
      const c = this.classOf[i]!;
      if (verdicts[c] === 0) verdicts[c] = GROUP_CHECKS.every((check) => check(need, this.representatives[c]!) === null) ? 1 : 2;
      return verdicts[c] === 1 && (!labels || checkLabels(need, this.machines[i]!) === null);
    };
  }

  /** The machines that pass every static check for the need, in the order given. */
  eligible(need: StageNeed): MachineView[] {
    const v = this.verdictsOf(needKey(need));
    for (let c = 0; c < v.length; c++) if (v[c] === 0) v[c] = GROUP_CHECKS.every((check) => check(need, this.representatives[c]!) === null) ? 1 : 2;
    const labels = Object.keys(need.labels).length > 0;
    const out: MachineView[] = [];
    // A table read per machine (the loop `passesFor` makes, without a call each).
    for (let i = 0; i < this.machines.length; i++) {
      if (v[this.classOf[i]!] === 1 && (!labels || checkLabels(need, this.machines[i]!) === null)) out.push(this.machines[i]!);
    }
    return out;
  }
}
