import { WHOLE_GPU_MILLI, type ShareMachine } from './gpu-share.js';
import type { TargetWorkload } from './target-workload.js';

/**
 * How much of each GPU type the typed work wants, as ranks: 0 for the types the target workload's
 * typed shapes (those naming GPU types) want least of (none, often), 1 for the next, …. A typed
 * shape's demand (count × GPUs × thousandths) is spread over the types it accepts in proportion to
 * their capacity, and a type's demand is taken over its capacity: on the trace's gpuspec33 list, T4
 * (1,291 typed pods for 842 GPUs) ranks last and G2 (331 for 4,392) near first. Gantry's `fgd`
 * breaks ties between equal FGD points by it, so work that may run anywhere leaves the GPUs that
 * typed work can only use to that work (docs/scheduling.md, "FGD's tie-break"). Types no machine
 * has are left out; equal demands get equal ranks. Pure.
 */
export function typedDemandRanks(machines: readonly ShareMachine[], w: TargetWorkload): Map<string, number> {
  const capacity = new Map<string, number>();
  // A run of GPUs of one type (a machine's, mostly all of them) counted in one look: a pass counts
  // the GPUs of 7,000 machines (docs/throughput.md, "Placement at scale").
  for (const m of machines) {
    const gpus = m.gpus;
    for (let k = 0; k < gpus.length;) {
      const type = gpus[k]!.type;
      let end = k + 1;
      while (end < gpus.length && gpus[end]!.type === type) end++;
      capacity.set(type, (capacity.get(type) ?? 0) + (end - k) * WHOLE_GPU_MILLI);
      k = end;
    }
  }
  const demand = new Map<string, number>([...capacity.keys()].map((t) => [t, 0]));
  for (const s of w.shapes) {
    if (s.gpuCount === 0 || s.gpuTypes.length === 0) continue;
    const accepted = s.gpuTypes.filter((t) => capacity.has(t));
    const room = accepted.reduce((sum, t) => sum + capacity.get(t)!, 0);
    // Per type: its part of the shape's demand (capacity / room) over its capacity.
    for (const t of accepted) demand.set(t, demand.get(t)! + (s.count * s.gpuCount * s.gpuMilli) / room);
  }
  const levels = [...new Set(demand.values())].sort((a, b) => a - b);
  return new Map([...demand].map(([t, d]) => [t, levels.indexOf(d)]));
}
