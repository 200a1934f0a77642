import { createHash } from 'node:crypto';
import { DEFAULT_TEAM } from './job-definition.js';
import { normalizeGpuType, poolOf, type Placement, type Resources } from './resources.js';

/** Who a stage's work belongs to, for quotas, fair share and preemption: also part of its shape. */
export interface ShapeOwner {
  team: string;
  preemptible: boolean;
  /** Its time limit: backfill onto a held machine looks at it (docs/scheduling.md). */
  timeoutSeconds?: number | null;
}

/**
 * A stage's shape: everything placement looks at (pool, CPU, memory, GPU count, share, memory and types, region,
 * labels, a gang's size and sameLabel, and for quotas and fair share its team and whether it is preemptible), as one short key. Two ready stages of one shape get the same answer from every machine,
 * so the scheduler reads each shape's queue only as deep as the cluster's free room could take
 * stages of that shape, whatever the backlog (docs/scheduling.md). Stored with the stage at submit.
 */
export function stageShape(resources: Resources, placement: Placement, owner: ShapeOwner = { team: DEFAULT_TEAM, preemptible: false }): string {
  const gpu = resources.gpu && resources.gpu.count > 0 ? resources.gpu : null;
  const types = gpu ? [...new Set(gpu.types.map(normalizeGpuType))].sort() : [];
  const labels = Object.entries(placement.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  // Allowed onto GPU machines is a different queue; the key is unchanged for every other stage, so
  // shapes stored before the setting existed stay what they were.
  const parts: unknown[] = [poolOf(resources), resources.cpuMillis, resources.memoryBytes, gpu?.count ?? 0, types, placement.region, labels];
  if (placement.allowGpuMachines && !gpu) parts.push('gpu-machines');
  // A share (0.25 is count 1 at 250 thousandths) or a GPU memory bound is another queue than whole
  // GPUs; stages without either keep the shapes they had.
  if (gpu && gpu.milli !== undefined && gpu.milli < 1000) parts.push({ gpuMilli: gpu.milli });
  if (gpu?.memoryBytes !== undefined) parts.push({ gpuMemoryBytes: gpu.memoryBytes });
  // Likewise the owner: the default team's non-preemptible stages keep the shapes they had.
  if (owner.team !== DEFAULT_TEAM || owner.preemptible) parts.push({ team: owner.team, preemptible: owner.preemptible });
  if (owner.timeoutSeconds) parts.push({ timeoutSeconds: owner.timeoutSeconds });
  // A gang is its own queue (N machines at once is not one machine's answer); ordinary stages,
  // which never carry `machines`, keep their shapes.
  if (resources.machines !== undefined && resources.machines > 1) parts.push({ machines: resources.machines, sameLabel: placement.sameLabel ?? null });
  const key = JSON.stringify(parts);
  return 'sh_' + createHash('sha256').update(key).digest('base64url').slice(0, 22);
}
