/**
 * The scheduler pass on the real Alibaba GPU trace (openb 2023, ../shared/traces/alibaba-gpu-2023):
 *  1. planPlacements with all 8,152 pods queued on the 1,523 idle machines: median of N runs after
 *     W warm-ups, with no cap (every pod placed or pending) and with the default options (the
 *     production cap of 1,000 placements per pass);
 *  2. the same with the cluster half full: the idle cluster after applying the uncapped plan's
 *     placements, in plan order, until half of all GPUs are allocated;
 *  3. replayTrace over both pod lists, at trace speed and with arrivals sped up (load knob):
 *     placed, never placed, waits, GPU utilisation, and the replay's own run time.
 * Prints one JSON object. Usage: npm run bench:scheduler [-- --runs 10 --warmup 2 --speedups 1,10000,100000]
 */
import { cpus } from 'node:os';
import { planPlacements, type PlanOptions } from '../src/scheduler/plan-placements.js';
import type { MachineView, SchedulerSnapshot } from '../src/scheduler/snapshot.js';
import { defaultAlibabaTraceDir, hasAlibabaTrace, readNodeList, readPodList, type PodListName } from '../src/sim/alibaba-trace.js';
import { replayTrace, utilisationBuckets, withArrivalSpeedup } from '../src/sim/trace-replay.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
};
const RUNS = Number(arg('runs', '10'));
const WARMUP = Number(arg('warmup', '2'));
const SPEEDUPS = arg('speedups', '1,10000,100000').split(',').map(Number);
const LISTS: PodListName[] = ['default', 'gpuspec33'];

const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

function timePass(snapshot: SchedulerSnapshot, opts: PlanOptions) {
  for (let i = 0; i < WARMUP; i++) planPlacements(snapshot, opts);
  const ms: number[] = [];
  let plan = planPlacements(snapshot, opts);
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    plan = planPlacements(snapshot, opts);
    ms.push(performance.now() - t0);
  }
  return {
    medianMs: round(median(ms)),
    minMs: round(Math.min(...ms)),
    maxMs: round(Math.max(...ms)),
    placed: plan.placements.length,
    pending: plan.pending.length,
    unreported: snapshot.queue.length - plan.placements.length - plan.pending.length,
  };
}

/** The idle cluster with the uncapped plan's placements applied, in order, until half the GPUs are taken. */
function halfFull(machines: readonly MachineView[], snapshot: SchedulerSnapshot): MachineView[] {
  const out = machines.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) }));
  const byId = new Map(out.map((m) => [m.id, m]));
  const total = out.reduce((n, m) => n + m.gpus.length, 0);
  let used = 0;
  for (const p of planPlacements(snapshot, { maxPlacements: Infinity }).placements) {
    if (used >= total / 2) break;
    const m = byId.get(p.machineId)!;
    m.cpuMillisFree -= p.cpuMillis;
    m.memoryBytesFree -= p.memoryBytes;
    for (const i of p.gpuIndices) m.gpus.find((g) => g.index === i)!.free = false;
    used += p.gpuIndices.length;
  }
  return out;
}

function usage(machines: readonly MachineView[]) {
  const sum = (f: (m: MachineView) => number) => machines.reduce((n, m) => n + f(m), 0);
  return {
    gpu: round(sum((m) => m.gpus.filter((g) => !g.free).length) / sum((m) => m.gpus.length), 3),
    cpu: round(1 - sum((m) => m.cpuMillisFree) / sum((m) => m.cpuMillisTotal), 3),
    memory: round(1 - sum((m) => m.memoryBytesFree) / sum((m) => m.memoryBytesTotal), 3),
  };
}

function main() {
  const dir = defaultAlibabaTraceDir();
  if (!hasAlibabaTrace(dir)) {
    console.error(`trace not found at ${dir}: clone the shared traces as ../shared beside the repo`);
    process.exit(2);
  }
  const machines = readNodeList(dir);
  const out: Record<string, unknown> = {
    machine: { cpus: cpus().length, cpuModel: cpus()[0]?.model, node: process.version, platform: `${process.platform} ${process.arch}` },
    runs: RUNS,
    warmup: WARMUP,
    cluster: { machines: machines.length, gpus: machines.reduce((n, m) => n + m.gpus.length, 0) },
  };

  const passes: Record<string, unknown> = {};
  for (const list of LISTS) {
    const pods = readPodList(list, dir);
    const idle: SchedulerSnapshot = { machines, queue: pods.map((p) => p.stage) };
    const half: SchedulerSnapshot = { machines: halfFull(machines, idle), queue: idle.queue };
    passes[list] = {
      queued: pods.length,
      idle: { usage: usage(idle.machines), uncapped: timePass(idle, { maxPlacements: Infinity }), defaultOptions: timePass(idle, {}) },
      halfFull: { usage: usage(half.machines), uncapped: timePass(half, { maxPlacements: Infinity }), defaultOptions: timePass(half, {}) },
    };
    console.error(`passes ${list}: ${JSON.stringify(passes[list])}`);
  }
  out.passes = passes;

  const replays: Record<string, unknown>[] = [];
  for (const list of LISTS) {
    const pods = readPodList(list, dir);
    for (const speedup of SPEEDUPS) {
      const t0 = performance.now();
      const r = replayTrace(machines, speedup === 1 ? pods : withArrivalSpeedup(pods, speedup));
      const wallMs = performance.now() - t0;
      const s = r.stats;
      const reasons = new Map<string, number>();
      for (const p of r.neverPlaced) reasons.set(p.reason, (reasons.get(p.reason) ?? 0) + 1);
      const week = 7 * 86400;
      const row = {
        list,
        speedup,
        replayWallMs: Math.round(wallMs),
        passes: s.passes,
        placed: s.placed,
        neverPlaced: s.neverPlaced,
        neverPlacedReasons: Object.fromEntries(reasons),
        placedOnArrival: s.placedOnArrival,
        waitSeconds: s.waitSeconds && {
          mean: round(s.waitSeconds.mean, 2),
          median: round(s.waitSeconds.median, 2),
          p95: round(s.waitSeconds.p95, 2),
          max: round(s.waitSeconds.max, 2),
        },
        gpuUtilisation: {
          mean: round(s.gpuUtilisation.mean, 5),
          meanWhileArriving: round(s.gpuUtilisation.meanWhileArriving, 5),
          peak: round(s.gpuUtilisation.peak, 4),
          // Only at trace speed: time-weighted mean per week of the trace.
          ...(speedup === 1
            ? {
                weekly: utilisationBuckets(r.utilisation, s.gpuUtilisation.totalGpus, s.startTime, s.endTime, week).map((b) => round(b.mean, 5)),
              }
            : {}),
        },
        spanSeconds: { start: s.startTime, lastArrival: round(s.lastArrival, 1), end: round(s.endTime, 1) },
      };
      replays.push(row);
      console.error(`replay ${list} x${speedup}: ${JSON.stringify(row)}`);
    }
  }
  out.replays = replays;
  console.log(JSON.stringify(out, null, 2));
}

main();
