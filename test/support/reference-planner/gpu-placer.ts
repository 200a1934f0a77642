// Frozen copy of src/scheduler/gpu-placer.ts as of ebf6444, before the placement-at-scale work (issue 32):
// the reference planner-equivalence.test.ts compares the planner with. Test-only; never edit to follow src.
import { checkTakesWork, fitChecks, type StageNeed } from './checks.js';
import { shareMachineOf, type ShareRequest } from '../../../src/scheduler/gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { shareContext, type SharePolicyName } from '../../../src/scheduler/share-policies.js';
import type { MachineView } from '../../../src/scheduler/snapshot.js';
import { shareRequestOfNeed } from './snapshot-workload.js';
import type { TargetWorkload } from './target-workload.js';

const STATIC_CHECKS = [checkTakesWork, ...fitChecks];
const UNKNOWN = 0;
const PASSES = 1;
const FAILS = 2;

/**
 * Where a GPU stage goes in one pass (docs/scheduling.md, "Placement of shares"): the share
 * planner's policy (FGD by default) over every GPU machine that passes the stage's static rules
 * (health, region, labels, GPU type, count and memory, CPU and memory in all) and is not held for
 * an earlier stage. The planner caches each machine's best choice per request shape and forgets a
 * machine's when it changes, so a stage costs one read per machine plus the machines changed since
 * its shape was last asked about; the static verdicts are cached per shape for the pass (they do
 * not change within it). The same `SharePlanner` the simulator replays the trace with: on the
 * same machine states, with the same policy and workload, the same choices.
 */
export class GpuPlacer {
  private planner: SharePlanner | null = null;
  /** Per shape key, per machine (in `machines` order): UNKNOWN, PASSES or FAILS the static rules. */
  private readonly statics = new Map<string, Uint8Array>();

  constructor(
    /** The pass's working copies of the machines with GPUs, in name order (what the planner sorts by too). */
    private readonly machines: readonly MachineView[],
    private readonly policy: SharePolicyName,
    private readonly workload: () => TargetWorkload,
  ) {}

  /** Built on first use, from the working copies as they are then (CPU work placed before included). */
  private plannerNow(): SharePlanner {
    if (this.planner === null) {
      const share = this.machines.map(shareMachineOf);
      this.planner = new SharePlanner(share, this.policy, shareContext(share, this.workload()));
      // Both orders are name, then id: the planner's indices are ours.
      this.machines.forEach((m, i) => {
        if (this.planner!.indexOf(m.id) !== i) throw new Error(`GPU placer: machine order differs at ${m.id}`);
      });
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
    let verdicts = this.statics.get(key);
    if (verdicts === undefined) this.statics.set(key, (verdicts = new Uint8Array(this.machines.length)));
    const v = verdicts;
    const eligible = (i: number) => {
      const m = this.machines[i]!;
      if (v[i] === UNKNOWN) v[i] = STATIC_CHECKS.every((check) => check(need, m) === null) ? PASSES : FAILS;
      return v[i] === PASSES && !barred(m);
    };
    const p = planner.choose(shareRequestOfNeed(need), eligible);
    return p === null ? null : { machine: this.machines[planner.indexOf(p.machineId)!]!, gpuIndices: p.gpuIndices };
  }

  /** Records a placement the pass made on a GPU machine (a GPU stage's, or a CPU stage's room), so later choices see it. */
  took(machineId: string, r: ShareRequest, gpuIndices: readonly number[]): void {
    if (this.planner === null || this.planner.indexOf(machineId) === undefined) return;
    this.planner.take(r, { machineId, gpuIndices: [...gpuIndices] });
  }
}
