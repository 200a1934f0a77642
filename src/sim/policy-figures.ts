/**
 * The policies compared on a trace, and the figures that compare them: GPU allocation ratio over
 * the busy span, waits of GPU pods (all, and high priority), pods never placed. Pure: a replay's
 * result in, numbers out. `bench/trace-policies.ts` prints them side by side.
 */
import { planPlacements } from '../scheduler/plan-placements.js';
import { QOS_PRIORITY, type TracePod } from './alibaba-trace.js';
import { planBestFit, planFifo } from './baseline-policies.js';
import { summarise, utilisationBuckets, type Planner, type ReplayResult, type SummaryStats, type UtilisationPoint } from './trace-replay.js';

export const TRACE_POLICIES = {
  fifo: { label: 'FIFO (arrival order, head-of-line blocking, first fit)', planner: planFifo },
  bestFit: { label: 'best fit (arrival order, skips what does not fit)', planner: planBestFit },
  gantry: { label: 'Gantry (`planPlacements`)', planner: planPlacements },
} as const satisfies Record<string, { label: string; planner: Planner }>;
export type TracePolicyName = keyof typeof TRACE_POLICIES;

/** "High priority": the trace's LS and Guaranteed pods (QoS priority 2 and 3). */
export const HIGH_PRIORITY = QOS_PRIORITY.LS;

export interface PolicyFigures {
  pods: number;
  placed: number;
  neverPlaced: number;
  gpuPods: number;
  gpuNeverPlaced: number;
  highPriorityGpuPods: number;
  /** [first arrival, last placement], seconds: from the first pod's arrival to the last pod's placement. */
  busySpan: { start: number; end: number };
  /** Time-weighted allocated / total GPUs over `busySpan`; 0 for an empty span. */
  gpuAllocationRatio: number;
  /** Wait (placement - arrival) of placed GPU pods, seconds. */
  gpuWaitSeconds: SummaryStats | null;
  highPriorityGpuWaitSeconds: SummaryStats | null;
}

/** Time-weighted allocated / total GPUs over [start, end] of a replay's series; 0 for an empty window. */
export function gpuAllocationRatio(series: readonly UtilisationPoint[], totalGpus: number, start: number, end: number): number {
  return utilisationBuckets(series, totalGpus, start, end, end - start)[0]?.mean ?? 0;
}

/** The figures of one replay of `pods` (the pods it was given). */
export function policyFigures(r: ReplayResult, pods: readonly TracePod[]): PolicyFigures {
  const byName = new Map(pods.map((p) => [p.stage.stageId, p]));
  const isGpu = (id: string) => (byName.get(id)?.stage.resources.gpu?.count ?? 0) > 0;
  const isHigh = (id: string) => (byName.get(id)?.stage.priority ?? -Infinity) >= HIGH_PRIORITY;
  const gpuPlaced = r.placements.filter((p) => isGpu(p.stageId));
  const start = r.stats.startTime;
  const end = r.placements.reduce((t, p) => Math.max(t, p.placedAt), start);
  return {
    pods: r.stats.pods,
    placed: r.stats.placed,
    neverPlaced: r.stats.neverPlaced,
    gpuPods: pods.filter((p) => isGpu(p.stage.stageId)).length,
    gpuNeverPlaced: r.neverPlaced.filter((p) => isGpu(p.stageId)).length,
    highPriorityGpuPods: pods.filter((p) => isGpu(p.stage.stageId) && isHigh(p.stage.stageId)).length,
    busySpan: { start, end },
    gpuAllocationRatio: gpuAllocationRatio(r.utilisation, r.stats.gpuUtilisation.totalGpus, start, end),
    gpuWaitSeconds: summarise(gpuPlaced.map((p) => p.waitSeconds)),
    highPriorityGpuWaitSeconds: summarise(gpuPlaced.filter((p) => isHigh(p.stageId)).map((p) => p.waitSeconds)),
  };
}
