/**
 * Issue 31's synthetic mix: the trace's own pods with a seeded fraction of its GPU pods turned into
 * gangs (docs/gangs.md), for `gang-replay.ts`. The trace has no multi-machine pods, so the gangs
 * are made up, from the trace's own figures where it has them: the 8-GPU model most of its 8-GPU
 * machines have, the CPU and memory of its 8-GPU pods, the run times of its long GPU pods. Pure.
 */
import { normalizeGpuType, poolOf, type Resources } from '../domain/resources.js';
import { seededRandom } from '../lib/seeded-random.js';
import type { MachineView } from '../scheduler/snapshot.js';
import type { TracePod } from './alibaba-trace.js';
import { replayStageOf } from './autoscale-replay.js';

export interface GangMixOptions {
  /** Of the pods asking for GPUs, the share that become gangs, 0–1 (default 0.02). */
  fraction?: number;
  /** Gang sizes are drawn uniformly from [min, max] machines (default 2–4). */
  minMachines?: number;
  maxMachines?: number;
  /** Whole GPUs per member (default 8: a machine's worth). */
  gpusPerMember?: number;
  /** The members' GPU model (default: `commonGpuModel` of the machines). */
  gpuType?: string;
  /** A gang's run time is one of the GPU pods' hold times in [longMin, longMax] seconds (default 1 h – 7 days). */
  longMinSeconds?: number;
  longMaxSeconds?: number;
  seed?: number;
}

export const DEFAULT_GANG_FRACTION = 0.02;
const DEFAULT_LONG_MIN_SECONDS = 3600;
/** Above it the trace's pods are services that ran for the whole trace (up to 145 days), not training runs. */
const DEFAULT_LONG_MAX_SECONDS = 7 * 86400;

export interface GangMix {
  pods: TracePod[];
  /** Stage ids of the gangs. */
  gangs: Set<string>;
  gpuType: string;
}

/** The GPU model of most machines with `gpus` GPUs (ties: the name first in order); null when none has that many. */
export function commonGpuModel(machines: readonly MachineView[], gpus = 8): string | null {
  const n = new Map<string, number>();
  for (const m of machines) if (m.gpus.length === gpus) n.set(m.gpus[0]!.type, (n.get(m.gpus[0]!.type) ?? 0) + 1);
  return [...n].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]?.[0] ?? null;
}

/**
 * The pods in their order, each GPU pod (in creation order, seeded) turned into a gang with
 * probability `fraction`: it keeps its name, arrival and priority (QoS) and asks for `size`
 * machines × `gpusPerMember` GPUs of `gpuType`, each member with the CPU and memory of one of the
 * trace's pods of that many GPUs that fits such a machine (drawn), and holds for a drawn long
 * pod's run time. The other pods are as `replayStageOf` reads them (a `gpu_milli` below 1000 is a
 * share of one GPU). Throws when the machines or pods lack what the mix is made of.
 */
export function withGangs(pods: readonly TracePod[], machines: readonly MachineView[], opts: GangMixOptions = {}): GangMix {
  const fraction = opts.fraction ?? DEFAULT_GANG_FRACTION;
  const min = opts.minMachines ?? 2;
  const max = opts.maxMachines ?? 4;
  const perMember = opts.gpusPerMember ?? 8;
  if (!(fraction >= 0 && fraction <= 1)) throw new Error(`gang fraction must be 0–1, got ${fraction}`);
  if (!Number.isInteger(min) || !Number.isInteger(max) || min < 2 || max < min) throw new Error(`gang sizes must be integers 2 ≤ min ≤ max, got ${min}–${max}`);
  const gpuType = opts.gpuType !== undefined ? normalizeGpuType(opts.gpuType) : commonGpuModel(machines, perMember);
  if (gpuType === null) throw new Error(`no machine has ${perMember} GPUs: a gang member would fit nowhere`);
  const hosts = machines.filter((m) => m.gpus.filter((g) => g.type === gpuType).length >= perMember);
  if (hosts.length < max) throw new Error(`${hosts.length} machines have ${perMember} ${gpuType} GPUs, fewer than a gang of ${max}`);
  // A member's CPU and memory: a trace pod of that many GPUs that fits every such machine.
  const room = { cpu: Math.min(...hosts.map((m) => m.cpuMillisTotal)), memory: Math.min(...hosts.map((m) => m.memoryBytesTotal)) };
  const shapes = pods.map((p) => p.stage.resources).filter((r) => r.gpu?.count === perMember && r.cpuMillis <= room.cpu && r.memoryBytes <= room.memory);
  if (shapes.length === 0) throw new Error(`no pod of ${perMember} GPUs fits a ${gpuType} machine: no member shape to draw`);
  const longMin = opts.longMinSeconds ?? DEFAULT_LONG_MIN_SECONDS;
  const longMax = opts.longMaxSeconds ?? DEFAULT_LONG_MAX_SECONDS;
  const runs = pods
    .filter((p) => p.stage.resources.gpu && p.holdSeconds >= longMin && p.holdSeconds <= longMax)
    .map((p) => p.holdSeconds)
    .sort((a, b) => a - b);
  if (runs.length === 0) throw new Error(`no GPU pod ran ${longMin}–${longMax} s: no gang run time to draw`);

  const random = seededRandom(opts.seed ?? 1);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const gangs = new Set<string>();
  const order = [...pods].sort((a, b) => a.creationTime - b.creationTime || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const turned = new Map<string, TracePod>();
  for (const p of order) {
    if (!p.stage.resources.gpu || random() >= fraction) continue;
    const size = min + Math.floor(random() * (max - min + 1));
    const shape = pick(shapes);
    const resources: Resources = { cpuMillis: shape.cpuMillis, memoryBytes: shape.memoryBytes, gpu: { count: perMember, types: [gpuType] }, machines: size };
    gangs.add(p.stage.stageId);
    turned.set(p.stage.stageId, {
      ...p,
      gpuMilli: 1000,
      fractionalGpu: false,
      holdSeconds: pick(runs),
      stage: { ...p.stage, resources, pool: poolOf(resources) },
    });
  }
  return { pods: pods.map((p) => turned.get(p.stage.stageId) ?? { ...p, stage: replayStageOf(p) }), gangs, gpuType };
}

/**
 * One machine in `every` of each GPU model (and of those without GPUs), in name order, the first of
 * each model always kept: the node list's mix at a smaller size. The trace's pods are a thin sample
 * (about 14 of its 6,212 GPUs busy on average at trace speed), so a smaller cluster is how they
 * contend at speed-ups where they still arrive as a stream rather than all at once.
 */
export function sampleMachines(machines: readonly MachineView[], every: number): MachineView[] {
  if (!Number.isInteger(every) || every < 1) throw new Error(`every must be an integer ≥ 1, got ${every}`);
  const seen = new Map<string, number>();
  return [...machines]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .filter((m) => {
      const model = m.gpus[0]?.type ?? '';
      const i = seen.get(model) ?? 0;
      seen.set(model, i + 1);
      return i % every === 0;
    });
}
