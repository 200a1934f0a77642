/**
 * The FGD paper's experiment (Weng et al., USENIX ATC '23) with Gantry's share planner: the trace's
 * GPU machines, the pod list shuffled with a seed and grown to 1.3 × the cluster's GPUs by sampling
 * it, pods placed one at a time and never leaving (docs/scheduling.md, "The paper's experiment").
 * Pure: trace data and a seed in, figures out.
 */
import { seededRandom } from '../lib/seeded-random.js';
import { requestGpuMilli, shareMachineOf, shareRequestProblem, WHOLE_GPU_MILLI, type ShareMachine, type ShareRequest } from '../scheduler/gpu-share.js';
import { SharePlanner, type SharePlacement } from '../scheduler/share-planner.js';
import { shareContext, type SharePolicyName } from '../scheduler/share-policies.js';
import type { MachineView } from '../scheduler/snapshot.js';
import { targetWorkload, type TargetWorkload } from '../scheduler/target-workload.js';
import type { TracePod } from './alibaba-trace.js';

/** A trace pod as a share request: `gpu_milli` per GPU (a share when below 1000, of one GPU). */
export function shareRequestOf(pod: TracePod): ShareRequest {
  const gpu = pod.stage.resources.gpu;
  const gpuCount = gpu?.count ?? 0;
  const r: ShareRequest = {
    cpuMillis: pod.stage.resources.cpuMillis,
    memoryBytes: pod.stage.resources.memoryBytes,
    gpuCount,
    gpuMilli: gpuCount > 0 ? pod.gpuMilli : 0,
    gpuTypes: gpu?.types ?? [],
  };
  const problem = shareRequestProblem(r);
  if (problem !== null) throw new Error(`pod ${pod.name}: ${problem}`);
  return r;
}

/** The cluster of the experiment: the machines with GPUs, all idle. */
export function gpuShareMachines(views: readonly MachineView[]): ShareMachine[] {
  return views.filter((m) => m.gpus.length > 0).map(shareMachineOf);
}

/** A named pod of the replay: the trace pod's name (a sampled copy gets `-tuned-N`) and its request. */
export interface ReplayPod {
  name: string;
  request: ShareRequest;
}

/**
 * The arrival order of one seed, as the paper's simulator builds it: pods sorted by name and
 * shuffled, then pods sampled from the name-sorted list (with replacement) and appended while the
 * GPU requested stays within `ratio` × the cluster's; it stops at the first sample that would pass
 * it. The simulator compares that sample's thousandths per GPU, not its total; kept, so the
 * workload is the same.
 */
export function inflatedArrivals(pods: readonly TracePod[], clusterGpuMilli: number, ratio: number, seed: number): ReplayPod[] {
  const random = seededRandom(seed);
  const sorted = pods.map((p) => ({ name: p.name, request: shareRequestOf(p) })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const out = [...sorted];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  let requested = out.reduce((s, p) => s + requestGpuMilli(p.request), 0);
  const target = ratio * clusterGpuMilli;
  // Pods without GPUs never bring the total closer: with only those there is nothing to grow.
  if (!sorted.some((p) => p.request.gpuMilli > 0)) return out;
  for (let n = 0; sorted.length > 0; n++) {
    const p = sorted[Math.floor(random() * sorted.length)]!;
    if (requested + p.request.gpuMilli > target) break;
    requested += requestGpuMilli(p.request);
    out.push({ name: `${p.name}-tuned-${n}`, request: p.request });
  }
  return out;
}

export interface ShareReplayPoint {
  /** GPU thousandths asked for by the pods so far, the dropped ones included. */
  arrivedMilli: number;
  /** GPU thousandths held by the pods placed so far. */
  allocatedMilli: number;
}

export interface ShareReplayResult {
  clusterGpuMilli: number;
  pods: number;
  dropped: number;
  /** One point after each pod. */
  series: ShareReplayPoint[];
  placements: (SharePlacement | null)[];
}

export interface ShareReplayOptions {
  policy: SharePolicyName;
  seed: number;
  /** Grow the pod list to this × the cluster's GPUs (the paper: 1.3). */
  ratio?: number;
  /** FGD's target workload; default: that of the pod list (before it grows), as in the paper. */
  workload?: TargetWorkload;
}

export function clusterGpuMilli(machines: readonly ShareMachine[]): number {
  return machines.reduce((s, m) => s + m.gpus.length * WHOLE_GPU_MILLI, 0);
}

/** One run of the experiment: every pod placed by the policy, or dropped where it fits nowhere. */
export function replayShares(machines: readonly ShareMachine[], pods: readonly TracePod[], opts: ShareReplayOptions): ShareReplayResult {
  const total = clusterGpuMilli(machines);
  const workload = opts.workload ?? targetWorkload(pods.map(shareRequestOf));
  // Random draws from the run's seed, as the simulator's Random draws from its Go seed.
  const planner = new SharePlanner(machines, opts.policy, { ...shareContext(machines, workload), seed: opts.seed });
  const arrivals = inflatedArrivals(pods, total, opts.ratio ?? 1.3, opts.seed);
  const series: ShareReplayPoint[] = [];
  const placements: (SharePlacement | null)[] = [];
  let arrivedMilli = 0;
  let allocatedMilli = 0;
  let dropped = 0;
  for (const pod of arrivals) {
    arrivedMilli += requestGpuMilli(pod.request);
    const p = planner.place(pod.request);
    if (p === null) dropped += 1;
    else allocatedMilli += requestGpuMilli(pod.request);
    placements.push(p);
    series.push({ arrivedMilli, allocatedMilli });
  }
  return { clusterGpuMilli: total, pods: arrivals.length, dropped, series, placements };
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

/**
 * Allocated GPU % at an arrived workload of `percent` % of the cluster's GPUs, as the paper's
 * `merge_alloc_discrete.py` reads a run: the mean allocated % (each rounded to 2 decimals) of the
 * points whose arrived % rounds to `percent`, or, when none does, of those within ±1; NaN when
 * none is. Rounded to 2 decimals.
 */
export function allocatedPercentAt(r: ShareReplayResult, percent: number): number {
  return allocatedPercentCurve(r, [percent])[0]!;
}

/**
 * `allocatedPercentAt` at each of `percents`, reading the run once: what a chart of the run
 * needs (one figure per arrived %). Arrived only grows along the series, so each rounded arrived %
 * holds a run of consecutive points, and the ±1 fallback sums them in series order, as a filter
 * over the whole series would.
 */
export function allocatedPercentCurve(r: ShareReplayResult, percents: readonly number[]): number[] {
  const byArrived = new Map<number, number[]>();
  for (const p of r.series) {
    const arrived = Math.round((100 * p.arrivedMilli) / r.clusterGpuMilli);
    let bucket = byArrived.get(arrived);
    if (bucket === undefined) byArrived.set(arrived, (bucket = []));
    bucket.push(round((100 * p.allocatedMilli) / r.clusterGpuMilli, 2));
  }
  return percents.map((percent) => {
    let near = byArrived.get(percent) ?? [];
    if (near.length === 0) near = [percent - 1, percent, percent + 1].flatMap((a) => byArrived.get(a) ?? []);
    if (near.length === 0) return NaN;
    return round(near.reduce((s, x) => s + x, 0) / near.length, 2);
  });
}
