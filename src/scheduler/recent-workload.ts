import type { QueuedStage, SchedulerSnapshot } from './snapshot.js';
import { snapshotWorkload } from './snapshot-workload.js';
import type { TargetWorkload } from './target-workload.js';

/** How many GPU stages the server's scheduler remembers for FGD's target workload. */
export const DEFAULT_RECENT_GPU_STAGES = 1000;

/**
 * FGD's "work that typically arrives" as the server's scheduler remembers it (docs/scheduling.md,
 * "The target workload in the server"): the GPU stages its passes have seen queued, each once, the
 * last `limit` of them, with the attempts the snapshot lists. One pass alone sees only the stages
 * waiting now, often one: then FGD scores most machines alike, the tie-break's best fit over the
 * whole cluster decides, and untyped work fills the small machines of scarce types that typed
 * stages need (measured: `npm run bench:trace-waits`, docs/scheduling.md). Memory, not state: it
 * only steers a heuristic, so a restart or a new leader starts it empty and it refills as stages
 * come; bounded by `limit` entries. Deterministic: the same passes give the same workloads.
 */
export class RecentWorkload {
  /** By stage id, in the order first seen; the oldest goes first past `limit`. */
  private readonly seen = new Map<string, Pick<QueuedStage, 'resources'>>();
  private cached: TargetWorkload | null = null;
  private cachedWithAttempts = false;

  constructor(private readonly limit: number = DEFAULT_RECENT_GPU_STAGES) {
    if (!Number.isInteger(limit) || limit < 1) throw new Error(`the recent workload's limit must be a positive whole number, not ${limit}`);
  }

  /** Notes the GPU stages of a pass's queue and returns the workload to plan it with. */
  observe(snapshot: Pick<SchedulerSnapshot, 'queue' | 'running'>): TargetWorkload {
    let changed = false;
    for (const q of snapshot.queue) {
      const gpu = q.resources.gpu;
      if (!gpu || gpu.count <= 0 || this.seen.has(q.stageId)) continue;
      this.seen.set(q.stageId, { resources: q.resources });
      changed = true;
      if (this.seen.size > this.limit) this.seen.delete(this.seen.keys().next().value!);
    }
    const running = snapshot.running ?? [];
    // Attempts change from pass to pass; without any in view the workload changes only with what was seen.
    if (this.cached !== null && !changed && running.length === 0 && !this.cachedWithAttempts) return this.cached;
    this.cached = snapshotWorkload({ queue: [...this.seen.values()], running });
    this.cachedWithAttempts = running.length > 0;
    return this.cached;
  }

  /** GPU stages remembered now. */
  get size(): number {
    return this.seen.size;
  }
}
