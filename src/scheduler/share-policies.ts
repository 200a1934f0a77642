import { clusteringPoints } from './clustering-score.js';
import { dotProductPoints } from './dot-product-score.js';
import { fgdPoints, fragmentationIncrease } from './fgd-score.js';
import { freeGpuMilli, gpuChoices, requestGpuMilli, WHOLE_GPU_MILLI, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { idHash, randomGpuKey, randomMachineKey } from './random-score.js';
import type { TargetWorkload } from './target-workload.js';
import { typedDemandRanks } from './typed-demand.js';

/**
 * Named placement policies for GPU shares (docs/scheduling.md, "Shares of a GPU and
 * fragmentation"). Each scores a (machine, GPU choice) pair, lower is better, as a pair of numbers
 * compared in order; equal scores go to the machine first by name, then id. Pure and deterministic.
 */
export const SHARE_POLICIES = ['fgd', 'fgd-paper', 'best-fit', 'packing', 'random', 'dotprod', 'clustering'] as const;
export type SharePolicyName = (typeof SHARE_POLICIES)[number];

/** Gantry's default for shares: the one that strands the fewest GPUs (bench/results/fgd.md). */
export const DEFAULT_SHARE_POLICY: SharePolicyName = 'fgd';

/**
 * The policies a server's pass may run (GANTRY_GPU_POLICY): those whose choice depends only on the
 * machines' state now. `random` needs a seed and a count of its draws, `clustering` the kinds of
 * request on each machine (which the store does not keep): the paper's peers, for `gantry sim` and
 * `npm run bench:fgd` only.
 */
export const SERVER_SHARE_POLICIES = ['fgd', 'fgd-paper', 'best-fit', 'packing', 'dotprod'] as const satisfies readonly SharePolicyName[];
export type ServerSharePolicyName = (typeof SERVER_SHARE_POLICIES)[number];

export function isServerSharePolicy(name: string): name is ServerSharePolicyName {
  return (SERVER_SHARE_POLICIES as readonly string[]).includes(name);
}

export function isSharePolicy(name: string): name is SharePolicyName {
  return (SHARE_POLICIES as readonly string[]).includes(name);
}

/** What scores need beyond the machine and the request. */
export interface ShareContext {
  /** The work FGD measures fragmentation against. */
  workload: TargetWorkload;
  /** Best fit's scales: the largest machine's CPU and GPU thousandths (128 cores and 8 GPUs on the trace, the paper's constants). */
  maxCpuMillis: number;
  maxGpuMilli: number;
  /** `typedDemandRanks` of the cluster for the workload: `fgd`'s tie-break. Absent: every type ranks 0. */
  typedDemand?: ReadonlyMap<string, number>;
  /** Random's seed (default 0). */
  seed?: number;
  /** Random's draw: which choice with this seed this is (default 0; `SharePlanner` counts its choices). */
  draw?: number;
}

export function shareContext(machines: readonly ShareMachine[], workload: TargetWorkload): ShareContext {
  let maxCpuMillis = 1;
  let maxGpuMilli = 1;
  for (const m of machines) {
    maxCpuMillis = Math.max(maxCpuMillis, m.cpuMillisTotal);
    maxGpuMilli = Math.max(maxGpuMilli, m.gpus.length * WHOLE_GPU_MILLI);
  }
  return { workload, maxCpuMillis, maxGpuMilli, typedDemand: typedDemandRanks(machines, workload) };
}

export type ShareScore = readonly [number, number];

export interface ShareChoice {
  gpuIndices: number[];
  score: ShareScore;
}

/** The paper's best fit: half the CPU left, half the GPU thousandths left, each over the largest machine's. */
function bestFitLeft(m: ShareMachine, r: ShareRequest, ctx: ShareContext): number {
  // One division of an exact integer: equal amounts left compare equal.
  const left = (m.cpuMillisFree - r.cpuMillis) * ctx.maxGpuMilli + (freeGpuMilli(m) - requestGpuMilli(r)) * ctx.maxCpuMillis;
  return left / (2 * ctx.maxCpuMillis * ctx.maxGpuMilli);
}

/** The free thousandths, now, of the GPUs a choice takes: fewer means a fuller GPU (shares pack onto shared GPUs). */
function roomTaken(m: ShareMachine, gpuIndices: readonly number[]): number {
  let room = 0;
  for (const i of gpuIndices) room += m.gpus.find((g) => g.index === i)!.freeMilli;
  return room;
}

/**
 * The paper's GPU packing as tiers: 0 when the request uses only GPUs already shared, 1 when it
 * breaks idle GPUs on a machine already in use, 2 on an idle machine; then the room of the GPUs it
 * takes (tier 0), the idle GPUs it breaks (tier 1), or the machine's GPUs (tier 2, small first).
 */
function packingScore(m: ShareMachine, r: ShareRequest, gpuIndices: readonly number[], ctx: ShareContext): ShareScore {
  if (r.gpuCount === 0) return [0, bestFitLeft(m, r, ctx)];
  if (m.gpus.every((g) => g.freeMilli === WHOLE_GPU_MILLI)) return [2, m.gpus.length];
  const idleTaken = gpuIndices.filter((i) => m.gpus.find((g) => g.index === i)!.freeMilli === WHOLE_GPU_MILLI).length;
  return idleTaken > 0 ? [1, idleTaken] : [0, roomTaken(m, gpuIndices)];
}

/**
 * Gantry's tie-break for FGD's points: for a GPU request, first the typed demand's rank of the type
 * it takes (the type typed work wants least first), then best fit; for CPU-only work, best fit
 * alone. Ranks are integers and best fit is within [0, 1], so 2 × rank + best fit orders by rank
 * first. Why CPU-only work is left out: it should go where CPU is plenty per GPU, and the typed
 * GPUs are those (T4 machines have 52 cores a GPU on the trace, G2 12); sending it by type too
 * exhausted G2's cores and left 11.6 % of GPUs unallocated at 130 % (bench/results, notes).
 */
function typedFirstThenBestFit(m: ShareMachine, r: ShareRequest, gpuIndices: readonly number[], ctx: ShareContext): number {
  const bestFit = bestFitLeft(m, r, ctx);
  if (gpuIndices.length === 0 || ctx.typedDemand === undefined) return bestFit;
  const type = m.gpus.find((g) => g.index === gpuIndices[0])!.type;
  return 2 * (ctx.typedDemand.get(type) ?? 0) + bestFit;
}

/** The score of one choice on one machine (`before`: F(m) now in whole units, `machineFragmentationUnits`, for FGD, when the caller has it). */
export function scoreChoice(
  policy: SharePolicyName,
  m: ShareMachine,
  r: ShareRequest,
  gpuIndices: readonly number[],
  ctx: ShareContext,
  before?: number,
): ShareScore {
  switch (policy) {
    case 'fgd':
      // The paper's points (more is better, so negated); ties go to the GPU type typed work wants least, then best fit.
      return [-fgdPoints(fragmentationIncrease(m, r, gpuIndices, ctx.workload, before)), typedFirstThenBestFit(m, r, gpuIndices, ctx)];
    case 'fgd-paper':
      // Exactly the paper's simulator: equal points go to the lowest GPU index, then the machine's name.
      return [-fgdPoints(fragmentationIncrease(m, r, gpuIndices, ctx.workload, before)), 0];
    case 'best-fit':
      // Within a machine every choice leaves the same total; the fullest GPU that fits wins.
      return [bestFitLeft(m, r, ctx), roomTaken(m, gpuIndices)];
    case 'packing':
      return packingScore(m, r, gpuIndices, ctx);
    case 'random': {
      const h = idHash(m.id);
      return [randomMachineKey(ctx.seed ?? 0, ctx.draw ?? 0, h), gpuIndices.length === 0 ? 0 : randomGpuKey(ctx.seed ?? 0, ctx.draw ?? 0, h, gpuIndices[0]!)];
    }
    // Machine-level points, as the simulator scores a node; ties between machines go to the name,
    // between GPUs of one machine to the fullest (`FULLEST_GPU_WITHIN`).
    case 'dotprod':
      return [-dotProductPoints(m, r, ctx.maxCpuMillis, ctx.maxGpuMilli), 0];
    case 'clustering':
      return [-clusteringPoints(m, r, ctx.maxGpuMilli), 0];
  }
}

/**
 * Policies whose score is the machine's alone and that take, on the machine, the fullest GPU with
 * room (lowest index among equals): the simulator's `-gpusel best`, which DotProd and Clustering
 * run with.
 */
const FULLEST_GPU_WITHIN: ReadonlySet<SharePolicyName> = new Set(['dotprod', 'clustering']);

export function compareScores(a: ShareScore, b: ShareScore): number {
  return a[0] - b[0] || a[1] - b[1];
}

/** The best choice on one machine, or null when the request does not fit there. Ties: the first choice (lowest GPU index). */
export function bestChoiceOn(policy: SharePolicyName, m: ShareMachine, r: ShareRequest, ctx: ShareContext, before?: number): ShareChoice | null {
  let best: ShareChoice | null = null;
  let bestRoom = 0;
  const fullestWithin = FULLEST_GPU_WITHIN.has(policy);
  // Scores depend on a GPU's type and room, not its index: of a share's GPUs alike, only the first
  // (which would win the tie anyway) is scored. An idle 8-GPU machine costs one score, not eight.
  // Not for random, which draws among the GPUs themselves, as the simulator does.
  const seen = new Set<string>();
  for (const gpuIndices of gpuChoices(m, r)) {
    if (gpuIndices.length === 1 && policy !== 'random') {
      const g = m.gpus.find((x) => x.index === gpuIndices[0])!;
      const key = `${g.type}|${g.freeMilli}`;
      if (seen.has(key)) continue;
      seen.add(key);
    }
    const score = scoreChoice(policy, m, r, gpuIndices, ctx, before);
    const room = fullestWithin ? roomTaken(m, gpuIndices) : 0;
    if (best === null || (compareScores(score, best.score) || room - bestRoom) < 0) {
      best = { gpuIndices, score };
      bestRoom = room;
    }
  }
  return best;
}

/** Machine order for ties: name, then id. */
export function compareShareMachines(a: ShareMachine, b: ShareMachine): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * Where the request goes, computed from scratch over every machine: the best-scoring choice,
 * ties to the machine first by name. Null when it fits nowhere now. `SharePlanner` gives the same
 * answer incrementally.
 */
export function chooseShare(
  machines: readonly ShareMachine[],
  r: ShareRequest,
  policy: SharePolicyName,
  ctx: ShareContext,
): { machine: ShareMachine; gpuIndices: number[] } | null {
  let best: { machine: ShareMachine; choice: ShareChoice } | null = null;
  for (const m of machines) {
    const choice = bestChoiceOn(policy, m, r, ctx);
    if (choice === null) continue;
    const c = best === null ? -1 : compareScores(choice.score, best.choice.score) || compareShareMachines(m, best.machine);
    if (c < 0) best = { machine: m, choice };
  }
  return best === null ? null : { machine: best.machine, gpuIndices: best.choice.gpuIndices };
}
