import type { StageNeed } from './checks.js';
import { headsToReadOfEligible } from './placeable-count.js';
import type { MachineView } from './snapshot.js';
import { StaticClasses } from './static-classes.js';

/**
 * How deep the server's pass reads each shape's queue (`headsToRead`), for all its shapes at once:
 * the machines are grouped once by what the static checks read (`StaticClasses`), so each shape
 * costs the checks per group and the room of the machines that could run it, not the checks on
 * every machine (docs/throughput.md, "Placement at scale"). With `mayPreempt` (attempts that may
 * be stopped or are leaving), a shape no room fits now but some machine could run is read one
 * deep: its head may preempt, or wait for room that is leaving.
 */
export function shapeDepths(needs: readonly StageNeed[], machines: readonly MachineView[], cap: number, mayPreempt: boolean): number[] {
  const classes = new StaticClasses(machines);
  return needs.map((need) => {
    const eligible = classes.eligible(need);
    // Machines that fail a static check add nothing to the room nor to "may run somewhere".
    const room = headsToReadOfEligible(need, eligible, cap);
    return room === 0 && mayPreempt && eligible.length > 0 ? 1 : room;
  });
}
