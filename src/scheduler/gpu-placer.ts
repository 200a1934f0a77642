import type { StageNeed } from './checks.js';
import { shareMachineOf, type ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { shareContext, type SharePolicyName } from './share-policies.js';
import type { MachineView } from './snapshot.js';
import { StaticClasses } from './static-classes.js';
import { shareRequestOfNeed } from './snapshot-workload.js';
import type { TargetWorkload } from './target-workload.js';

/**
 * Where a GPU stage goes in one pass (docs/scheduling.md, "Placement of shares"): the share
 * planner's policy (FGD by default) over every GPU machine that passes the stage's static rules
 * (health, region, labels, GPU type, count and memory, CPU and memory in all) and is not held for
 * an earlier stage. The planner caches each machine's best choice per request shape and forgets a
 * machine's when it changes. It chooses among groups of machines alike in their static class
 * (`StaticClasses`) and their state (`SharePlanner.chooseInGroups`): a choice costs one look per
 * group, a few hundred on a cluster of 10,000 machines, and a placement moves its machine to the
 * group of its new state. A need that names labels (checked per machine) keeps a tournament tree
 * over the machines that pass its static rules (`SharePlanner.chooseWhere`, `ChoiceTree`). The
 * static verdicts are per group and shape, for the pass (they do not change within it). The same `SharePlanner` the simulator replays the trace with: on the
 * same machine states, with the same policy and workload, the same choices.
 */
export class GpuPlacer {
  private planner: SharePlanner | null = null;
  /** The static rules' verdicts, per group of alike machines and per shape key (they do not change within the pass). */
  private classes: StaticClasses | null = null;
  /** Per need, its share request and that request's shape in the planner (`requestOf`). */
  private readonly requests = new Map<StageNeed, { request: ShareRequest; shape: number; labels: boolean }>();

  constructor(
    /** The pass's working copies of the machines with GPUs, in name, then id order (`compareMachines`): the share planner's order, which it is told it need not sort. */
    private readonly machines: readonly MachineView[],
    private readonly policy: SharePolicyName,
    private readonly workload: () => TargetWorkload,
    /** These machines grouped by their static checks, where the caller has them (else built on first use). */
    classes?: StaticClasses,
  ) {
    this.classes = classes ?? null;
  }

  /** Built on first use, from the working copies as they are then (CPU work placed before included). */
  private plannerNow(): SharePlanner {
    if (this.planner === null) {
      const share = this.machines.map(shareMachineOf);
      // Copies made here for it alone: handed over, not copied a second time. Ours are in name,
      // then id order (the pass sorts them by `compareMachines`), the planner's order: not sorted
      // again, and the planner's indices are ours.
      this.planner = new SharePlanner(share, this.policy, shareContext(share, this.workload()), true, true);
    }
    return this.planner;
  }

  /**
   * The policy's choice for the stage among machines that pass its static rules and are not
   * `barred` (held for an earlier stage), or null when none has room now. `key` names the
   * stage's need (identical needs, identical static verdicts).
   */
  choose(key: string, need: StageNeed, barred: (m: MachineView) => boolean): { machine: MachineView; gpuIndices: number[] } | null {
    const planner = this.plannerNow();
    const classes = (this.classes ??= new StaticClasses(this.machines));
    const isBarred = (i: number) => barred(this.machines[i]!);
    // Labels are checked per machine (racks would make a group of every few machines): a need that
    // names some gets a tree over its machines; the others choose among groups of alike machines.
    const { request, shape, labels } = this.requestOf(need);
    const p = labels
      ? planner.chooseWhere(request, key, classes.passesFor(need, key), isBarred, shape)
      : planner.chooseInGroups(request, classes.classOf, classes.classPasses(need, key), isBarred, key, shape);
    return p === null ? null : { machine: this.machines[planner.indexOf(p.machineId)!]!, gpuIndices: p.gpuIndices };
  }

  /**
   * The need as the share planner reads it, its shape there and whether it names labels, made once per need (the pass's
   * needs are made once per request object and never changed): not a request and a text key per
   * GPU stage (docs/throughput.md, "Placement at scale").
   */
  private requestOf(need: StageNeed): { request: ShareRequest; shape: number; labels: boolean } {
    let known = this.requests.get(need);
    if (known === undefined) {
      const request = shareRequestOfNeed(need);
      this.requests.set(need, (known = { request, shape: this.plannerNow().shapeOf(request), labels: Object.keys(need.labels).length > 0 }));
    }
    return known;
  }

  /** Records a placement the pass made on a GPU machine (a GPU stage's, or a CPU stage's room), so later choices see it. */
  took(machineId: string, need: StageNeed, gpuIndices: readonly number[]): void {
    if (this.planner === null || this.planner.indexOf(machineId) === undefined) return;
    this.planner.take(this.requestOf(need).request, { machineId, gpuIndices: [...gpuIndices] });
  }
}
