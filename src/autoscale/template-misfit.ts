import {
  checkGpuMachine,
  checkGpuTotal,
  checkGpuType,
  checkLabels,
  checkRegion,
  checkCpuTotal,
  checkMemoryTotal,
  type Check,
  type StageNeed,
} from '../scheduler/checks.js';
import { describeGpus } from '../scheduler/pending-reason.js';
import { formatCpu, formatMemory } from '../spec/quantity.js';
import { describeTemplate, templateMachine, type PoolTemplate } from './pool-template.js';

/** Why no template could ever run a stage: what a new machine cannot fix. */
export const MisfitKind = {
  /** It wants a region no template serves. */
  region: 'region',
  /** It wants labels no template (of its region) carries. */
  labels: 'labels',
  /** It wants a GPU type no template (of its region and labels) has. */
  gpuType: 'gpu-type',
  /** More GPUs, CPU or memory than any template that matches it otherwise. */
  tooBig: 'too-big',
  /** A CPU stage, and every template that matches it has GPUs (it does not allow GPU machines). */
  gpuMachine: 'gpu-machine',
  /** There are no templates at all. */
  noTemplates: 'no-templates',
} as const;
export type MisfitKind = (typeof MisfitKind)[keyof typeof MisfitKind];

/** The static checks in the order a template is judged by: the further a template gets, the nearer it is to serving the stage. */
const ORDER: readonly { check: Check; kind: MisfitKind }[] = [
  { check: checkRegion, kind: MisfitKind.region },
  { check: checkLabels, kind: MisfitKind.labels },
  { check: checkGpuType, kind: MisfitKind.gpuType },
  { check: checkGpuTotal, kind: MisfitKind.tooBig },
  { check: checkCpuTotal, kind: MisfitKind.tooBig },
  { check: checkMemoryTotal, kind: MisfitKind.tooBig },
  { check: checkGpuMachine, kind: MisfitKind.gpuMachine },
];

function describeNeed(need: StageNeed): string {
  const gpus = need.gpuCount > 0 ? `${describeGpus(need.gpuCount, need.gpuTypes)}, ` : '';
  return `${gpus}${formatCpu(need.cpuMillis)} CPU, ${formatMemory(need.memoryBytes)}`;
}

/**
 * Why no template of `pools` could run the stage even on a machine of its own, or null when one
 * could. Judged by the scheduler's own static checks (region, labels, GPU type and count, CPU,
 * memory, GPU machines kept for GPU work) on each template as an idle machine; the reason names the
 * template that got furthest, so the operator sees what to change (the stage, or the template).
 */
export function templateMisfit(need: StageNeed, pools: readonly PoolTemplate[]): { kind: MisfitKind; reason: string } | null {
  if (pools.length === 0) return { kind: MisfitKind.noTemplates, reason: 'no pool has a template to start machines from' };
  let nearest: { pool: PoolTemplate; at: number } | null = null;
  for (const pool of pools) {
    const m = templateMachine(pool.template, pool.name);
    const at = ORDER.findIndex(({ check }) => check(need, m) !== null);
    if (at < 0) return null;
    if (nearest === null || at > nearest.at) nearest = { pool, at };
  }
  const { pool, at } = nearest!;
  const kind = ORDER[at]!.kind;
  switch (kind) {
    case MisfitKind.region:
      return { kind, reason: `no template serves region ${need.region ?? 'any'}` };
    case MisfitKind.labels: {
      const labels = Object.entries(need.labels)
        .map(([k, v]) => `${k}=${v}`)
        .sort()
        .join(',');
      return { kind, reason: `no template${need.region ? ` in region ${need.region}` : ''} carries labels ${labels}` };
    }
    case MisfitKind.gpuType:
      return { kind, reason: `no template has ${need.gpuTypes.length ? `${need.gpuTypes.join(' or ')} GPUs` : 'GPUs'}` };
    case MisfitKind.tooBig:
      return { kind, reason: `too big for any template: it needs ${describeNeed(need)}; the nearest, ${pool.name}, is ${describeTemplate(pool.template)}` };
    case MisfitKind.gpuMachine:
      return { kind, reason: 'a CPU stage, and every template that matches it has GPUs (placement.allowGpuMachines: true lets it in)' };
    case MisfitKind.noTemplates:
      return { kind, reason: 'no pool has a template to start machines from' };
  }
}
