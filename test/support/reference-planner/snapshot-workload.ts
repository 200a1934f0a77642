// Frozen copy of src/scheduler/snapshot-workload.ts as of ebf6444, before the placement-at-scale work (issue 32):
// the reference planner-equivalence.test.ts and bench:placement compare the planner with. Test-only; never edit to follow src.
import { GPU_MILLI_WHOLE, gpuMilliOf, normalizeGpuType } from './resources.js';
import type { StageNeed } from './checks.js';
import type { ShareRequest } from '../../../src/scheduler/gpu-share.js';
import type { QueuedStage, SchedulerSnapshot } from '../../../src/scheduler/snapshot.js';
import { targetWorkload, type TargetWorkload } from './target-workload.js';

/** A stage's need as the share model reads it (GPU memory only where the stage bounds it). */
export function shareRequestOfNeed(need: StageNeed): ShareRequest {
  return {
    cpuMillis: need.cpuMillis,
    memoryBytes: need.memoryBytes,
    gpuCount: need.gpuCount,
    gpuMilli: need.gpuCount > 0 ? need.gpuMilli : 0,
    gpuTypes: need.gpuTypes,
    ...(need.gpuCount > 0 && need.gpuMemoryBytes !== null ? { gpuMemoryBytes: need.gpuMemoryBytes } : {}),
  };
}

/** When a snapshot has no GPU work at all: one whole GPU of any type, the commonest request on a GPU cluster. */
const FALLBACK: ShareRequest = { cpuMillis: 0, memoryBytes: 0, gpuCount: 1, gpuMilli: GPU_MILLI_WHOLE, gpuTypes: [] };

/**
 * FGD's "work that typically arrives", as the server's pass knows it (docs/scheduling.md, "The
 * target workload in the server"): the GPU shapes of the queued stages (one per stage read, so a
 * shape counts as often as it waits) and of the active attempts the snapshot lists, each
 * attempt by the type it got. CPU-only work is left out: the pass places it by its own ranking,
 * never by FGD, and counting it would only shift every GPU score alike. With no GPU work in the
 * snapshot, one whole GPU (then no GPU stage is placed by it anyway). Pure; the paper's
 * popularity cut (95 %) applies.
 */
export function snapshotWorkload(snapshot: { queue: readonly Pick<QueuedStage, 'resources'>[]; running?: SchedulerSnapshot['running'] }): TargetWorkload {
  const requests: ShareRequest[] = [];
  for (const q of snapshot.queue) {
    const gpu = q.resources.gpu;
    if (!gpu || gpu.count <= 0) continue;
    requests.push({
      cpuMillis: q.resources.cpuMillis,
      memoryBytes: q.resources.memoryBytes,
      gpuCount: gpu.count,
      gpuMilli: gpuMilliOf(q.resources),
      gpuTypes: [...new Set(gpu.types.map(normalizeGpuType))].sort(),
    });
  }
  for (const a of snapshot.running ?? []) {
    if (a.leaving || a.gpuIndices.length === 0) continue;
    requests.push({
      cpuMillis: a.cpuMillis,
      memoryBytes: a.memoryBytes,
      gpuCount: a.gpuIndices.length,
      gpuMilli: a.gpuMilli ?? GPU_MILLI_WHOLE,
      gpuTypes: a.gpuType === null ? [] : [normalizeGpuType(a.gpuType)],
    });
  }
  return targetWorkload(requests.length ? requests : [FALLBACK]);
}
