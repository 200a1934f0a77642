import { GPU_MILLI_WHOLE, gpuMilliOf, normalizeGpuType } from '../domain/resources.js';
import type { StageNeed } from './checks.js';
import type { ShareRequest } from './gpu-share.js';
import type { QueuedStage, SchedulerSnapshot } from './snapshot.js';
import { targetWorkload, targetWorkloadOfCounts, type TargetWorkload } from './target-workload.js';

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
  // The queued stages counted by what the workload reads of them first (a pass reads thousands
  // of heads of a few dozen shapes), each distinct request made once.
  const queued = new Map<string, { request: ShareRequest; count: number }>();
  // Stages of one shape share their resources object (the store reads a shape's request once):
  // the key is made once per object, not per stage.
  const byObject = new Map<QueuedStage['resources'], { request: ShareRequest; count: number }>();
  // The server's heads come shape by shape: the stage before's object, and its entry, without a lookup.
  let lastResources: QueuedStage['resources'] | null = null;
  let lastEntry: { request: ShareRequest; count: number } | null = null;
  for (const q of snapshot.queue) {
    if (q.resources === lastResources) {
      if (lastEntry !== null) lastEntry.count += 1;
      continue;
    }
    const gpu = q.resources.gpu;
    lastResources = q.resources;
    lastEntry = null;
    if (!gpu || gpu.count <= 0) continue;
    const same = byObject.get(q.resources);
    if (same !== undefined) {
      same.count += 1;
      lastEntry = same;
      continue;
    }
    const key = `${q.resources.cpuMillis}|${gpu.count}|${gpu.milli ?? ''}|${gpu.types.join('\u0000')}`;
    const known = queued.get(key);
    if (known !== undefined) {
      byObject.set(q.resources, known);
      known.count += 1;
      lastEntry = known;
      continue;
    }
    const request = {
      cpuMillis: q.resources.cpuMillis,
      memoryBytes: q.resources.memoryBytes,
      gpuCount: gpu.count,
      gpuMilli: gpuMilliOf(q.resources),
      gpuTypes: [...new Set(gpu.types.map(normalizeGpuType))].sort(),
    };
    const entry = { request, count: 1 };
    queued.set(key, entry);
    byObject.set(q.resources, entry);
    lastEntry = entry;
  }
  const counted = [...queued.values()];
  for (const a of snapshot.running ?? []) {
    if (a.leaving || a.gpuIndices.length === 0) continue;
    counted.push({
      count: 1,
      request: {
        cpuMillis: a.cpuMillis,
        memoryBytes: a.memoryBytes,
        gpuCount: a.gpuIndices.length,
        gpuMilli: a.gpuMilli ?? GPU_MILLI_WHOLE,
        gpuTypes: a.gpuType === null ? [] : [normalizeGpuType(a.gpuType)],
      },
    });
  }
  return counted.length ? targetWorkloadOfCounts(counted) : targetWorkload([FALLBACK]);
}
