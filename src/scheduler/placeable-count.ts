import { GPU_MILLI_WHOLE } from '../domain/resources.js';
import { acceptsGpuType, checkTakesWork, fitChecks, gpuCountsByType, gpuRoomFor, roomFor, wholeGpuStagesRoom, type StageNeed } from './checks.js';
import { labelOf, type GangNeed } from './gang-placer.js';
import type { MachineView } from './snapshot.js';

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
    total += roomOn(need, m);
  }
  return Math.min(total, cap);
}

/** How many stages of this need a machine that passes the static checks has room for now. */
function roomOn(need: StageNeed, m: MachineView): number {
  const room = roomFor(need, m);
  const n = Math.min(fits(room.cpuMillis, need.cpuMillis), fits(room.memoryBytes, need.memoryBytes));
  if (need.gpuCount > 0 && need.gpuMilli < GPU_MILLI_WHOLE) {
    // Shares: as many as each acceptable GPU's free thousandths (and GPU memory) hold.
    let shares = 0;
    for (const g of m.gpus) if (acceptsGpuType(need, g.type)) shares += gpuRoomFor(need, g);
    return Math.min(n, shares);
  }
  if (need.gpuCount > 0) {
    // Stages that accept several types may each take a different one on the same machine.
    return Math.min(n, wholeGpuStagesRoom(need, m));
  }
  return n;
}

/**
 * How deep a pass reads this shape's queue: as deep as the room could take its stages, or, for a
 * stage of two or more GPUs that no room fits now but some machine would when idle, its head alone:
 * the planner then holds it a machine, so that smaller work cannot keep taking the GPUs it waits
 * for (docs/scheduling.md, "Reservations"). A gang's shape: `gangHeadsToRead`.
 */
export function headsToRead(need: StageNeed, machines: readonly MachineView[], cap: number): number {
  return depthOf(need, placeableCount(need, machines, cap), () => mayRunSomewhere(need, machines));
}

/**
 * `headsToRead` over machines the caller knows pass every static check for the need (shapeDepths'
 * groups, docs/throughput.md "Placement at scale"): their room alone, without the checks again.
 */
export function headsToReadOfEligible(need: StageNeed, eligible: readonly MachineView[], cap: number): number {
  let total = 0;
  for (const m of eligible) {
    if (total >= cap) break;
    total += roomOn(need, m);
  }
  return depthOf(need, Math.min(total, cap), () => eligible.length > 0);
}

/**
 * `headsToReadOfEligible` over the eligible machines given as groups of machines alike in all that
 * `roomOn` reads (one machine of each and how many): each group's room once, times its count.
 */
export function headsToReadOfGroups(need: StageNeed, groups: readonly { machine: MachineView; count: number }[], cap: number): number {
  let total = 0;
  for (const g of groups) {
    if (total >= cap) break;
    total += g.count * roomOn(need, g.machine);
  }
  return depthOf(need, Math.min(total, cap), () => groups.length > 0);
}

/** The depth for `n` stages the room could take: n, or the head alone of a multi-GPU stage that some machine could run when idle. */
function depthOf(need: StageNeed, n: number, mayRun: () => boolean): number {
  if (n > 0 || need.gpuCount < 2) return n;
  return mayRun() ? 1 : 0;
}

/** Whether some machine passes every static check for it: it would fit there when idle. */
export function mayRunSomewhere(need: StageNeed, machines: readonly MachineView[]): boolean {
  return machines.some((m) => STATIC_CHECKS.every((check) => check(need, m) === null));
}

/**
 * At most how many whole gangs of this shape the free room could take now (counted up to `cap`),
 * by the gang placer's rule (docs/gangs.md): its members on distinct machines of one group (a GPU
 * type, and one value of `sameLabel` when set). In a group whose machines have room for c₁, c₂, …
 * members, k gangs need k members on each of `size` distinct machines, so at most the largest k
 * with Σ min(cᵢ, k) ≥ k × size; summed over the groups. An upper bound (a machine's CPU counts in
 * each of its GPU types' groups; other shapes compete for the room), so reading that deep loses
 * nothing of what a pass could place; where the member's room alone was read before, a gang of 4
 * on 4 machines with 1 free GPU each read 4 gangs where 1 fits.
 */
export function gangPlaceableCount(gang: GangNeed, machines: readonly MachineView[], cap: number): number {
  let total = 0;
  for (const rooms of gangGroups(gang, machines).values()) {
    if (total >= cap) break;
    total += wholeGangs(rooms, gang.size, cap);
  }
  return Math.min(total, cap);
}

/**
 * How deep a pass reads a gang shape's queue: as deep as whole gangs fit now, and at least its
 * head when some group has `size` machines that could take a member when idle. A gang waits for
 * a set of machines, not for one machine's room: whatever its members' size (1 GPU each, or CPU
 * only), the head is read, so that the planner holds it its set and smaller work cannot keep
 * taking the machines it waits for (docs/gangs.md, "Its reservation").
 */
export function gangHeadsToRead(gang: GangNeed, machines: readonly MachineView[], cap: number): number {
  const n = gangPlaceableCount(gang, machines, cap);
  if (n > 0 || cap < 1) return n;
  for (const rooms of gangGroups(gang, machines).values()) if (rooms.length >= gang.size) return 1;
  return 0;
}

/**
 * The machines that could take a member were they idle, by group (GPU type and label value, as
 * `chooseGang` groups them), each with how many members its room takes now (0: busy).
 */
function gangGroups(gang: GangNeed, machines: readonly MachineView[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  // A share of a GPU is refused for a gang (the spec and the planner both): no group takes it.
  if (gang.member.gpuCount > 0 && gang.member.gpuMilli < GPU_MILLI_WHOLE) return out;
  for (const m of machines) {
    const value = labelOf(m, gang.sameLabel);
    if (value === undefined) continue;
    const types = gang.member.gpuCount > 0 ? [...gpuCountsByType(gang.member, m).keys()] : [null];
    for (const type of types) {
      const need = type === null ? gang.member : { ...gang.member, gpuTypes: [type] };
      if (STATIC_CHECKS.some((check) => check(need, m) !== null)) continue;
      const key = `${type ?? ''}\0${value}`;
      const rooms = out.get(key) ?? [];
      rooms.push(roomOn(need, m));
      out.set(key, rooms);
    }
  }
  return out;
}

/** The most gangs of `size` whose members each take a distinct machine, the machines having room for `rooms` members; up to `cap`. */
function wholeGangs(rooms: readonly number[], size: number, cap: number): number {
  if (rooms.length < size) return 0;
  const capped = rooms.map((c) => Math.min(c, cap));
  const enough = (k: number) => capped.reduce((a, c) => a + Math.min(c, k), 0) >= k * size;
  // Σ min(cᵢ, k) − k × size is concave in k and 0 at 0: the k that fit are 0 to the largest.
  let lo = 0;
  let hi = Math.min(cap, Math.floor(capped.reduce((a, b) => a + b, 0) / size));
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (enough(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

function fits(free: number, each: number): number {
  if (free < 0) return 0;
  return each <= 0 ? Number.POSITIVE_INFINITY : Math.floor(free / each);
}
