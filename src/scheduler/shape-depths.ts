import { gpuFreeMilli } from '../domain/resources.js';
import { Alike, mix } from './alike.js';
import type { StageNeed } from './checks.js';
import { needKey } from './need-key.js';
import { headsToReadOfEligible, headsToReadOfGroups } from './placeable-count.js';
import type { MachineView } from './snapshot.js';
import { StaticClasses } from './static-classes.js';

/**
 * How deep the server's pass reads each shape's queue (`headsToRead`), for all its shapes at once:
 * the machines are grouped once by what the static checks read (`StaticClasses`) and by their free
 * room, so each shape costs the checks per group and the room of one machine per group of alike
 * machines that could run it (a few hundred at 10,000 machines), not the checks and the room of
 * every machine (docs/throughput.md, "Placement at scale"). A need that names labels (checked per
 * machine) reads the room of each eligible machine. With `mayPreempt` (attempts that may be
 * stopped or are leaving), a shape no room fits now but some machine could run is read one deep:
 * its head may preempt, or wait for room that is leaving.
 */
export function shapeDepths(
  needs: readonly StageNeed[],
  machines: readonly MachineView[],
  cap: number,
  mayPreempt: boolean,
  /** The machines grouped by their static checks: the caller's, to give the planner too (`PlanOptions.staticClasses`). */
  classes: StaticClasses = new StaticClasses(machines),
): number[] {
  const groups = roomGroups(machines, classes.classOf);
  return needs.map((need) => {
    let room: number;
    let any: boolean;
    if (Object.keys(need.labels).length > 0) {
      const eligible = classes.eligible(need);
      room = headsToReadOfEligible(need, eligible, cap);
      any = eligible.length > 0;
    } else {
      const passes = classes.classPasses(need, needKey(need));
      const eligible = groups.filter((g) => passes(g.cls));
      // Machines that fail a static check add nothing to the room nor to "may run somewhere".
      room = headsToReadOfGroups(need, eligible, cap);
      any = eligible.length > 0;
    }
    return room === 0 && mayPreempt && any ? 1 : room;
  });
}

/** Machines grouped by their static class and their free room (CPU, memory, each GPU's thousandths and memory): one machine of each group and the group's size. */
function roomGroups(machines: readonly MachineView[], classOf: Int32Array): { cls: number; machine: MachineView; count: number }[] {
  // By index: the class says the GPUs' types and sizes by position; their room is all that is left.
  const hash = (i: number) => {
    const m = machines[i]!;
    let h = mix(mix(mix(classOf[i]!, m.cpuMillisFree), m.memoryBytesFree), m.gpus.length);
    for (const g of m.gpus) h = mix(mix(h, gpuFreeMilli(g)), g.memoryBytesFree ?? -1);
    return h;
  };
  const same = (i: number, j: number) => {
    const a = machines[i]!;
    const b = machines[j]!;
    if (classOf[i] !== classOf[j] || a.cpuMillisFree !== b.cpuMillisFree || a.memoryBytesFree !== b.memoryBytesFree || a.gpus.length !== b.gpus.length)
      return false;
    for (let k = 0; k < a.gpus.length; k++) {
      const x = a.gpus[k]!;
      const y = b.gpus[k]!;
      if (gpuFreeMilli(x) !== gpuFreeMilli(y) || x.memoryBytesFree !== y.memoryBytesFree) return false;
    }
    return true;
  };
  const alike = new Alike(hash, same);
  const out: { cls: number; machine: MachineView; count: number }[] = [];
  for (let i = 0; i < machines.length; i++) {
    const id = alike.groupOf(i);
    if (id === out.length) out.push({ cls: classOf[i]!, machine: machines[i]!, count: 1 });
    else out[id]!.count += 1;
  }
  return out;
}
