import { GPU_MILLI_WHOLE } from '../../domain/resources.js';
import { shareAllocationProblem, type ShareMachine, type ShareRequest } from '../../scheduler/gpu-share.js';
import type { MachineView, PlannedPlacement } from '../../scheduler/snapshot.js';

/**
 * The apply step's re-check of one placement against the machine as it is now (Nomad's plan
 * applier): the share model's fit rule (scheduler/gpu-share.ts, the rule the planner's share
 * policies and the simulator use), so several shares go onto one GPU while their thousandths sum
 * to at most 1000, a whole GPU only onto a GPU nothing holds, and a share never onto a GPU held
 * whole. GPU memory is checked here as well: the share model counts thousandths only. Null when
 * it fits, else why not.
 */
export function placementProblem(m: MachineView, pl: PlannedPlacement): string | null {
  const milli = placementMilli(pl);
  const machine: ShareMachine = {
    id: m.id,
    name: m.name,
    cpuMillisTotal: m.cpuMillisTotal,
    cpuMillisFree: m.cpuMillisFree,
    memoryBytesTotal: m.memoryBytesTotal,
    memoryBytesFree: m.memoryBytesFree,
    gpus: m.gpus.map((g) => ({ index: g.index, type: g.type, freeMilli: freeMilliOf(g) })),
  };
  const request: ShareRequest = {
    cpuMillis: pl.cpuMillis,
    memoryBytes: pl.memoryBytes,
    gpuCount: pl.gpuIndices.length,
    gpuMilli: pl.gpuIndices.length ? milli : 0,
    gpuTypes: [],
  };
  const problem = shareAllocationProblem(machine, request, pl.gpuIndices);
  if (problem !== null || pl.gpuMemoryBytes === undefined) return problem;
  for (const i of pl.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i)!;
    const total = g.memoryBytesTotal ?? null;
    if (total === null) return `GPU ${i} does not report its memory, needs ${pl.gpuMemoryBytes} bytes of it`;
    // A whole GPU needs that much memory in all; a share holds that much of what is free.
    const room = milli === GPU_MILLI_WHOLE ? total : (g.memoryBytesFree ?? total);
    if (pl.gpuMemoryBytes > room) return `GPU ${i} has ${room} memory bytes ${milli === GPU_MILLI_WHOLE ? 'in all' : 'free'}, needs ${pl.gpuMemoryBytes}`;
  }
  return null;
}

/** Takes a placement that fits (check placementProblem first) from the machine's free room. */
export function takePlacement(m: MachineView, pl: PlannedPlacement): void {
  const milli = placementMilli(pl);
  for (const i of pl.gpuIndices) {
    const g = m.gpus.find((x) => x.index === i)!;
    g.freeMilli = freeMilliOf(g) - milli;
    g.free = g.freeMilli === GPU_MILLI_WHOLE;
    // Only a share holds GPU memory apart from the rest: a whole GPU's memory is all its own.
    if (milli < GPU_MILLI_WHOLE && pl.gpuMemoryBytes !== undefined && g.memoryBytesTotal != null) {
      g.memoryBytesFree = (g.memoryBytesFree ?? g.memoryBytesTotal) - pl.gpuMemoryBytes;
    }
  }
  m.cpuMillisFree -= pl.cpuMillis;
  m.memoryBytesFree -= pl.memoryBytes;
}

function placementMilli(pl: PlannedPlacement): number {
  return pl.gpuMilli ?? GPU_MILLI_WHOLE;
}

function freeMilliOf(g: MachineView['gpus'][number]): number {
  return g.freeMilli ?? (g.free ? GPU_MILLI_WHOLE : 0);
}
