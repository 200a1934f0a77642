// Frozen copy of src/scheduler/placeable-count.ts as of ebf6444, before the placement-at-scale work (issue 32):
// the reference planner-equivalence.test.ts compares the planner with. Test-only; never edit to follow src.
import { GPU_MILLI_WHOLE } from './resources.js';
import { acceptsGpuType, checkTakesWork, fitChecks, gpuCountsByType, gpuRoomFor, roomFor, type StageNeed } from './checks.js';
import type { MachineView } from '../../../src/scheduler/snapshot.js';

const STATIC_CHECKS = [checkTakesWork, ...fitChecks];

/**
 * At most how many stages of this need the cluster's free room could take now (counted up to
 * `cap`): per machine that could ever run it, the fewest of CPU, memory and GPUs of one type it has
 * room for (GPUs: summed over the acceptable types, each a whole number of stages; shares: as many
 * as each acceptable GPU's free thousandths hold, `gpuRoomFor`). An upper bound, since stages of other shapes compete for the same room, and exactly
 * the depth to which a pass reads this shape's queue: identical stages get identical answers, so
 * the ones past that depth could not be placed in this pass whatever the backlog behind them.
 */
export function placeableCount(need: StageNeed, machines: readonly MachineView[], cap: number): number {
  let total = 0;
  for (const m of machines) {
    if (total >= cap) break;
    if (STATIC_CHECKS.some((check) => check(need, m) !== null)) continue;
    const room = roomFor(need, m);
    let n = Math.min(fits(room.cpuMillis, need.cpuMillis), fits(room.memoryBytes, need.memoryBytes));
    if (need.gpuCount > 0 && need.gpuMilli < GPU_MILLI_WHOLE) {
      // Shares: as many as each acceptable GPU's free thousandths (and GPU memory) hold.
      let shares = 0;
      for (const g of m.gpus) if (acceptsGpuType(need, g.type)) shares += gpuRoomFor(need, g);
      n = Math.min(n, shares);
    } else if (need.gpuCount > 0) {
      // Stages that accept several types may each take a different one on the same machine.
      let gpus = 0;
      for (const c of gpuCountsByType(need, m).values()) gpus += Math.floor(c.free / need.gpuCount);
      n = Math.min(n, gpus);
    }
    total += n;
  }
  return Math.min(total, cap);
}

/**
 * How deep a pass reads this shape's queue: as deep as the room could take its stages, or, for a
 * stage of two or more GPUs that no room fits now but some machine would when idle, its head alone:
 * the planner then holds it a machine, so that smaller work cannot keep taking the GPUs it waits
 * for (docs/scheduling.md, "Reservations").
 */
export function headsToRead(need: StageNeed, machines: readonly MachineView[], cap: number): number {
  const n = placeableCount(need, machines, cap);
  if (n > 0 || need.gpuCount < 2) return n;
  return mayRunSomewhere(need, machines) ? 1 : 0;
}

/** Whether some machine passes every static check for it: it would fit there when idle. */
export function mayRunSomewhere(need: StageNeed, machines: readonly MachineView[]): boolean {
  return machines.some((m) => STATIC_CHECKS.every((check) => check(need, m) === null));
}

function fits(free: number, each: number): number {
  if (free < 0) return 0;
  return each <= 0 ? Number.POSITIVE_INFINITY : Math.floor(free / each);
}
