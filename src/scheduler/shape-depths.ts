import { gpuFreeMilli } from '../domain/resources.js';
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
  const out: { cls: number; machine: MachineView; count: number }[] = [];
  const ids = new Map<string, number>();
  for (let i = 0; i < machines.length; i++) {
    const m = machines[i]!;
    // The class says the GPUs' types and sizes by position; their room is all that is left.
    let key = `${classOf[i]}#${m.cpuMillisFree}/${m.memoryBytesFree}`;
    for (const g of m.gpus) key += `|${gpuFreeMilli(g)}:${g.memoryBytesFree ?? ''}`;
    const id = ids.get(key);
    if (id === undefined) {
      ids.set(key, out.length);
      out.push({ cls: classOf[i]!, machine: m, count: 1 });
    } else out[id]!.count += 1;
  }
  return out;
}
