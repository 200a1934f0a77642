/**
 * Issue 31's question with numbers: the Alibaba trace's pods with a seeded share of its GPU pods
 * turned into gangs of 2–4 machines × 8 GPUs of the common 8-GPU model (src/sim/gang-mix.ts),
 * replayed through the real `planPlacements` with `gangs: true` (src/sim/gang-replay.ts), with and
 * without reservations for gangs (`PlanOptions.gangReservations`), at each arrival speed-up.
 * Waits of gangs and of the other GPU pods, GPU-hours held idle for waiting gangs, gangs placed,
 * and every pass checked for a gang placed or held in part. Deterministic.
 *
 * Why a week and one machine in 10: the trace's pods are a thin sample of a 149-day production
 * cluster (about 14 of its 6,212 GPUs busy on average at trace speed), and a pass over thousands of
 * waiting pods on 1,523 machines costs seconds, so the whole list on the whole node list either
 * never contends or takes an hour a replay. Its busiest week on one machine in 10 of each model
 * (the node list's mix at a tenth) contends at a few times trace speed and replays in seconds.
 *
 * Usage: npm run bench:gangs [-- --pods default|gpuspec33 --days 142-148 (default: the busiest 7)
 *          --every 10 --fraction 0.02 --speedups 1,32,128 --seed 1 --json --out FILE (default bench/results/gangs.md, none with --json)]
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  defaultAlibabaTraceDir,
  hasAlibabaTrace,
  NODE_LIST_FILE,
  POD_LIST_FILES,
  readNodeList,
  readPodList,
  type PodListName,
  type TracePod,
} from '../src/sim/alibaba-trace.js';
import { sampleMachines, withGangs } from '../src/sim/gang-mix.js';
import { replayGangs, type GangReplayResult, type WaitFigures } from '../src/sim/gang-replay.js';
import { withArrivalSpeedup } from '../src/sim/trace-replay.js';
import { arg, machineAndCommit, num, usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const REPO = resolve(fileURLToPath(import.meta.url), '../..');

const DIR = arg('trace', defaultAlibabaTraceDir());
const LIST = arg('pods', 'default') as PodListName;
const SPEEDUPS = arg('speedups', '1,32,128').split(',').map(Number);
const EVERY = num('every', 10);
const FRACTION = num('fraction', 0.02);
const SEED = num('seed', 1);
const WEEK = 7;
const JSON_OUT = process.argv.includes('--json');
const OUT = arg('out', JSON_OUT ? '' : 'bench/results/gangs.md');
if (!Object.hasOwn(POD_LIST_FILES, LIST)) throw new Error(`unknown pod list ${LIST} (${Object.keys(POD_LIST_FILES).join(', ')})`);
if (!hasAlibabaTrace(DIR)) throw new Error(`trace not found at ${DIR}`);
if (SPEEDUPS.some((s) => !(s > 0) || !Number.isFinite(s))) throw new Error(`--speedups must be numbers above 0, got ${arg('speedups', '')}`);

const day = (p: TracePod) => Math.floor(p.creationTime / 86400);
/** The first day of the WEEK-day window with the most pods asking for GPUs (ties: the earlier). */
function busiestWeek(pods: readonly TracePod[]): number {
  const n = new Map<number, number>();
  for (const p of pods) if (p.stage.resources.gpu) n.set(day(p), (n.get(day(p)) ?? 0) + 1);
  let best = { from: 0, count: -1 };
  for (let from = 0; from <= Math.max(0, ...n.keys()); from++) {
    let count = 0;
    for (let d = from; d < from + WEEK; d++) count += n.get(d) ?? 0;
    if (count > best.count) best = { from, count };
  }
  return best.from;
}

const t0 = performance.now();
const nodes = readNodeList(DIR);
const allPods = readPodList(LIST, DIR);
const DAYS = (() => {
  const v = arg('days', '');
  if (v === '') {
    const from = busiestWeek(allPods);
    return { from, to: from + WEEK - 1 };
  }
  const m = /^(\d+)-(\d+)$/.exec(v);
  if (!m || Number(m[2]) < Number(m[1])) throw new Error(`--days wants FROM-TO (trace days, FROM ≤ TO), got ${v}`);
  return { from: Number(m[1]), to: Number(m[2]) };
})();
const windowPods = allPods.filter((p) => day(p) >= DAYS.from && day(p) <= DAYS.to);
if (windowPods.length === 0) throw new Error(`no pods on days ${DAYS.from}–${DAYS.to}`);
const machines = sampleMachines(nodes, EVERY);
const mix = withGangs(windowPods, machines, { fraction: FRACTION, seed: SEED });

interface Row {
  speedup: number;
  reservations: boolean;
  result: GangReplayResult;
  seconds: number;
}
const rows: Row[] = [];
for (const speedup of SPEEDUPS) {
  const pods = speedup === 1 ? mix.pods : withArrivalSpeedup(mix.pods, speedup);
  for (const reservations of [true, false]) {
    const t = performance.now();
    const result = replayGangs(machines, pods, { reservations });
    rows.push({ speedup, reservations, result, seconds: (performance.now() - t) / 1000 });
  }
}
const totalSeconds = (performance.now() - t0) / 1000;

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const hours = (s: number) => f1(s / 3600);
const waits = (w: WaitFigures) => (w.waitSeconds ? `${f0(w.waitSeconds.mean)} / ${f0(w.waitSeconds.median)} / ${f0(w.waitSeconds.p99)}` : '–');
const gpusOf = (ms: typeof machines) => ms.reduce((n, m) => n + m.gpus.length, 0);
const hosts = machines.filter((m) => m.gpus.length === 8 && m.gpus[0]!.type === mix.gpuType).length;

function table(): string {
  const head = [
    'speed-up',
    'gang reservations',
    'gangs placed',
    'gang wait s (mean / p50 / p99)',
    'other GPU pods wait s (mean / p50 / p99)',
    'GPU-h idle, held for gangs',
    'GPU-h idle, held for one-machine pods',
    'gang placements checked whole',
    'passes',
    'wall',
  ];
  const lines = [head, head.map(() => '---')];
  for (const r of rows) {
    const x = r.result;
    lines.push([
      `${r.speedup}×`,
      r.reservations ? 'on' : 'off',
      `${x.gangs.placed}/${x.gangs.pods}`,
      waits(x.gangs),
      waits(x.otherGpuPods),
      hours(x.gangHeldIdleGpuSeconds),
      hours(x.stageHeldIdleGpuSeconds),
      String(x.gangPlacementsChecked),
      String(x.passes),
      `${f1(r.seconds)} s`,
    ]);
  }
  return `| ${lines.map((l) => l.join(' | ')).join(' |\n| ')} |`;
}

/** Which way the numbers fall at each speed-up, in words, from the figures (rewritten each run). */
function reading(): string {
  return SPEEDUPS.map((s) => {
    const on = rows.find((r) => r.speedup === s && r.reservations)!.result;
    const off = rows.find((r) => r.speedup === s && !r.reservations)!.result;
    const gOn = on.gangs.waitSeconds?.mean ?? 0;
    const gOff = off.gangs.waitSeconds?.mean ?? 0;
    const pOn = on.otherGpuPods.waitSeconds?.mean ?? 0;
    const pOff = off.otherGpuPods.waitSeconds?.mean ?? 0;
    if (gOn === 0 && gOff === 0 && pOn === 0 && pOff === 0)
      return `- **${s}×:** nothing waits under either policy: no contention, and the two policies place alike.`;
    // Within 5 % reads "about as long": a second on a mean of hours is no difference.
    const verb = Math.abs(gOn - gOff) <= 0.05 * Math.max(gOn, gOff) ? 'about as long' : gOn < gOff ? 'less' : 'longer';
    const p50 = (x: GangReplayResult) => f0(x.gangs.waitSeconds?.median ?? 0);
    const gang = `gangs wait ${verb} with reservations (mean ${f0(gOn)} s, p50 ${p50(on)} s, against ${f0(gOff)} s, p50 ${p50(off)} s without)`;
    const small = `the other GPU pods wait a mean ${f0(pOn)} s with them against ${f0(pOff)} s without`;
    return `- **${s}×:** ${gang}; ${small}; the holds kept ${hours(on.gangHeldIdleGpuSeconds)} GPU-hours idle (${hours(off.gangHeldIdleGpuSeconds)} without, as it must be).`;
  }).join('\n');
}

if (JSON_OUT) {
  const out = rows.map((r) => ({ ...r, result: { ...r.result, gangTimes: undefined } }));
  process.stdout.write(`${JSON.stringify({ days: DAYS, every: EVERY, fraction: FRACTION, seed: SEED, rows: out, totalSeconds }, null, 2)}\n`);
} else {
  const gpuPods = windowPods.filter((p) => p.stage.resources.gpu).length;
  const md = `# Gangs among the Alibaba trace's pods, with and without reservations

Generated by \`npm run bench:gangs\` (\`bench/gangs.ts\`, \`src/sim/gang-mix.ts\`, \`src/sim/gang-replay.ts\`).

${machineAndCommit(REPO)}
- **Cluster:** one machine in ${EVERY} of each GPU model of \`${NODE_LIST_FILE}\` (\`sampleMachines\`): ${machines.length} machines, ${gpusOf(machines)} GPUs, ${hosts} of them with 8 ${mix.gpuType} GPUs (the gangs' model, the most common 8-GPU one).
- **Pods:** days ${DAYS.from}–${DAYS.to} of \`${POD_LIST_FILES[LIST]}\`${arg('days', '') === '' ? ' (the 7 days with the most GPU pods)' : ''}: ${windowPods.length} pods, ${gpuPods} with GPUs, each holding what it got for as long as it ran in production; a \`gpu_milli\` below 1000 is a share of one GPU.
- **Gangs:** ${mix.gangs.size} of the GPU pods (each with probability ${FRACTION}, seed ${SEED}) become gangs: same arrival and priority, 2–4 machines × 8 ${mix.gpuType} GPUs, each member the CPU and memory of one of the trace's 8-GPU pods that fits a ${mix.gpuType} machine, running as long as one of the GPU pods that ran 1 h – 7 days (drawn); ${rows[0]!.result.gangs.gpus} GPUs asked in all.
- **Placement:** the real \`planPlacements\` as the server runs it (\`serverPlanner\`: FGD for one-machine GPU pods, best fit for gangs), \`gangs: true\`; **on**: a gang that does not fit is held its whole machine set (docs/gangs.md, "Its reservation"); **off** (\`gangReservations: false\`): it waits holding nothing. Multi-GPU pods of one machine are held a machine under both (docs/scheduling.md, "Reservations"). No pod has a time limit, so nothing backfills a held machine.
- **Speed-ups:** ${SPEEDUPS.map((s) => `${s}×`).join(', ')}: a pod arrives at creation_time / speed-up and keeps its run time, so a speed-up is the load.
- **Run:** ${totalSeconds.toFixed(1)} s in all.

${table()}

## Reading

${reading()}

## Definitions

- **Wait:** placement − arrival, seconds, over the placed; p50 and p99 by nearest rank. **Other GPU pods:** the pods with GPUs that are not gangs.
- **GPU-h idle, held:** after each event time's passes, the free GPUs (a GPU shared in part counts its free thousandths) of the machines the last pass held for a waiting gang (or for a waiting multi-GPU pod of one machine), integrated until the next event time: what the holds keep from other work, there being no backfill.
- **Checked whole:** every pass's plan is checked (\`checkGangsWhole\`): a gang is placed with every member (one per rank, distinct machines, each its full GPU count) and held on exactly its size of machines, or not at all (none, with reservations off); the replay applies a placement's members all or none, re-checking each as the store does. A failure stops the run.
`;
  console.log(md);
  if (OUT !== '') {
    writeFileSync(resolve(REPO, OUT), md);
    console.log(`written to ${OUT}`);
  }
}
