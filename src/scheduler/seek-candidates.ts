import { firstReject, type StageNeed } from './checks.js';
import { compareCpuFits } from './rank.js';
import type { MachineView } from './snapshot.js';

/** What a look found: the best fit among the machines it took (null: none), and where the next look for an identical need may start. */
export interface Sought {
  best: MachineView | null;
  next: number;
}

/**
 * The best of the candidates a pass's scan would find for a CPU stage (`need.gpuCount` 0), as
 * `bestCandidate` would choose it (`compareCpuFits`), without a candidate object per machine nor
 * the rejects the scan would record (they are read only when no machine takes the stage, and the
 * caller scans again for them then), from `start`. Writes into `out` (the caller's, reused) where
 * the next look for an identical need may start: the machines before it lack the need's CPU or
 * memory, which within a pass only shrink, so they lack it for the rest of the pass
 * (docs/throughput.md, "Placement at scale": CPU stages re-read the full machines at the front of
 * the name order on every placement).
 *
 * A machine short of free CPU or memory fails `firstReject` (checkCpuBusy, checkMemoryBusy): it is
 * skipped without running the checks. The others are judged exactly as `scan` judges them.
 */
export function seekCandidates(
  need: StageNeed,
  machines: readonly MachineView[],
  limit: number,
  start: number,
  held: ReadonlySet<string>,
  backfills: ((m: MachineView) => boolean) | undefined,
  out: Sought,
): Sought {
  let found = 0;
  let next = start;
  let prefix = true;
  let best: MachineView | null = null;
  for (let i = start; i < machines.length && found < limit; i++) {
    const m = machines[i]!;
    if (need.cpuMillis > m.cpuMillisFree || need.memoryBytes > m.memoryBytesFree) {
      if (prefix) next = i + 1;
      continue;
    }
    prefix = false;
    if (firstReject(need, m) !== null) continue;
    // Held for a stage before this one: as good as busy for it, unless it backfills (as `scan`).
    if (held.size > 0 && held.has(m.id) && !(backfills?.(m) ?? false)) continue;
    found += 1;
    // As bestCandidate over the candidates in scan order: the first of the least.
    if (best === null || compareCpuFits(need, m, best) < 0) best = m;
  }
  out.best = best;
  out.next = next;
  return out;
}
