/**
 * Placement at scale (issue 32): the scheduler pass as the server runs it (src/server/scheduler-pass.ts,
 * fullPass) on synthetic clusters of 1,000, 10,000 and 50,000 machines with 10,000 to 1,000,000
 * queued stages of mixed shapes. Per pass: for each shape with queued stages, `headsToRead` over
 * the machines (how deep the store reads that shape's queue), those heads, and `planPlacements`
 * over them with the server's options (`gangs: true`, 1,000 placements at most). The bench then
 * applies the plan to its machines (what the store's planApply does), and placed stages run for a
 * few passes and free their room, so the cluster churns. Passes repeat until the queue drains, a
 * pass places nothing, or the cell's time budget is spent.
 *
 * The planner before issue 32 (test/support/reference-planner/, frozen) runs the same passes in
 * lockstep: the two plans of each pass must be equal (the run stops otherwise), and each is timed
 * on its own, alternating which goes first, so the ratio is measured on the same machine state
 * under the same noise.
 *
 * What it reports per cell: placements per second (the pass's placements over its time, median
 * over the passes that placed), pass time p50/p99, the distinct shapes, the heads read, the heap.
 * It writes bench/results/placement.md (rewritten each run) and bench/results/placement.svg.
 *
 * Usage: npm run bench:placement [-- --quick] [--budget SECONDS] [--seed N] [--no-reference] [--versus DIR] [--cells 10000x100000,...] [--out PATH]
 * (--quick: two small cells, 2 s each, nothing written unless --out is given).
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { seededRandom } from '../src/lib/seeded-random.js';
import type { Resources } from '../src/domain/resources.js';
import { poolOf } from '../src/domain/resources.js';
import { stageNeed, type StageNeed } from '../src/scheduler/checks.js';
import { releaseAllocation, takeAllocation } from '../src/scheduler/placement-fit.js';
import { compareQueued, DEFAULT_MAX_PLACEMENTS, planPlacements, type PlanOptions } from '../src/scheduler/plan-placements.js';
import { shapeDepths } from '../src/scheduler/shape-depths.js';
import { StaticClasses } from '../src/scheduler/static-classes.js';
import type { MachineView, Plan, PlannedPlacement, QueuedStage, SchedulerSnapshot } from '../src/scheduler/snapshot.js';
import { headsToRead as referenceHeadsToRead } from '../test/support/reference-planner/placeable-count.js';
import { planPlacements as referencePlanPlacements } from '../test/support/reference-planner/plan-placements.js';
import { arg, machineAndCommit, num, usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const REPO = resolve(fileURLToPath(import.meta.url), '../..');
const QUICK = process.argv.includes('--quick');
const REFERENCE = !process.argv.includes('--no-reference');
const SEED = num('seed', 32);
const BUDGET_S = num('budget', QUICK ? 2 : 20);
const OUT = arg('out', QUICK ? '' : 'bench/results/placement.md');
const MAX_PLACEMENTS = DEFAULT_MAX_PLACEMENTS;
const Gi = 1024 ** 3;

function parseCells(text: string): [number, number][] {
  return text.split(',').map((c) => {
    const m = /^(\d+)x(\d+)$/.exec(c.trim());
    if (m === null) throw new Error(`--cells: "${c}" is not MACHINESxQUEUED (e.g. 10000x100000)`);
    return [Number(m[1]), Number(m[2])];
  });
}
const FULL_CELLS = '1000x10000,1000x100000,1000x1000000,10000x10000,10000x100000,10000x1000000,50000x10000,50000x100000,50000x1000000';
const CELLS = parseCells(arg('cells', QUICK ? '1000x10000,10000x100000' : FULL_CELLS));

// ---------------------------------------------------------------- the synthetic cluster

/**
 * Machine kinds shaped like the Alibaba GPU trace's node list (openb 2023,
 * ../shared/traces/alibaba-gpu-2023: G2 8-GPU hosts the most, then 2-GPU T4 hosts, then CPU-only
 * ones), with an H100 and an A100 kind added so that typed 8-GPU work has its own machines. Weights
 * are per thousand machines.
 */
const KINDS: { weight: number; cores: number; memGi: number; gpus: number; type: string; gpuMemGi: number }[] = [
  { weight: 300, cores: 96, memGi: 384, gpus: 8, type: 'G2', gpuMemGi: 32 },
  { weight: 220, cores: 104, memGi: 512, gpus: 2, type: 'T4', gpuMemGi: 16 },
  { weight: 200, cores: 32, memGi: 256, gpus: 0, type: '', gpuMemGi: 0 },
  { weight: 80, cores: 96, memGi: 512, gpus: 0, type: '', gpuMemGi: 0 },
  { weight: 60, cores: 16, memGi: 120, gpus: 2, type: 'P100', gpuMemGi: 16 },
  { weight: 60, cores: 128, memGi: 1024, gpus: 8, type: 'H100', gpuMemGi: 80 },
  { weight: 50, cores: 96, memGi: 768, gpus: 8, type: 'A100', gpuMemGi: 80 },
  { weight: 30, cores: 32, memGi: 128, gpus: 4, type: 'V100M16', gpuMemGi: 16 },
];

function pick<T extends { weight: number }>(xs: readonly T[], rnd: () => number): T {
  const total = xs.reduce((n, x) => n + x.weight, 0);
  let r = rnd() * total;
  for (const x of xs) if ((r -= x.weight) < 0) return x;
  return xs[xs.length - 1]!;
}

function cluster(n: number, rnd: () => number): MachineView[] {
  return Array.from({ length: n }, (_, i) => {
    const k = pick(KINDS, rnd);
    const name = `node-${String(i).padStart(6, '0')}`;
    return {
      id: `id-${name}`,
      name,
      health: 'ready',
      scheduling: 'eligible',
      region: null,
      labels: { rack: `r${Math.floor(i / 40)}` },
      cpuMillisTotal: k.cores * 1000,
      memoryBytesTotal: k.memGi * Gi,
      cpuMillisFree: k.cores * 1000,
      memoryBytesFree: k.memGi * Gi,
      // As the agent reports them: the model's name (the planner compares types case-insensitively).
      gpus: Array.from({ length: k.gpus }, (_, index) => ({ index, type: k.type, free: true, memoryBytesTotal: k.gpuMemGi * Gi })),
    };
  });
}

// ---------------------------------------------------------------- the queue

interface ShapeSpec {
  weight: number;
  resources: Resources;
  allowGpuMachines?: boolean;
  team?: string;
}

/** The mix: CPU stages, 1/2/4/8-GPU stages of a type or any, shares of a GPU; each in two teams, so that teams are in play. */
function shapeCatalogue(): ShapeSpec[] {
  const out: ShapeSpec[] = [];
  const add = (weight: number, cores: number, memGi: number, gpu: Resources['gpu'], allowGpuMachines = false) => {
    for (const team of ['research', 'prod']) out.push({ weight, resources: { cpuMillis: cores * 1000, memoryBytes: memGi * Gi, gpu }, allowGpuMachines, team });
  };
  for (const [cores, memGi] of [
    [1, 2],
    [2, 4],
    [4, 16],
    [8, 32],
    [16, 64],
  ] as const) {
    add(6, cores, memGi, null);
    add(1, cores, memGi, null, true);
  }
  for (const type of ['G2', 'T4', 'P100', 'H100', 'A100', 'V100M16']) {
    add(4, 8, 32, { count: 1, types: [type] });
    add(2, 16, 64, { count: 2, types: [type] });
    add(1, 24, 128, { count: 4, types: [type] });
  }
  for (const type of ['G2', 'H100', 'A100']) add(1, 64, 256, { count: 8, types: [type] });
  add(4, 4, 16, { count: 1, types: [] });
  add(2, 8, 32, { count: 2, types: [] });
  add(1, 64, 256, { count: 8, types: [] });
  for (const milli of [250, 500]) {
    add(4, 2, 8, { count: 1, types: ['T4'], milli });
    add(2, 4, 16, { count: 1, types: ['G2'], milli, memoryBytes: 8 * Gi });
    add(2, 2, 8, { count: 1, types: [], milli });
  }
  return out;
}

interface Shape {
  key: string;
  spec: ShapeSpec;
  /** Its stages in queue order (compareQueued); the placed ones are cut out after each pass. */
  queue: QueuedStage[];
}

function queueOf(n: number, rnd: () => number): Shape[] {
  const catalogue = shapeCatalogue();
  // Each shape's stages share its request's objects (resources and placement), as the store's
  // queueHeads gives them (one read of a shape's request, scheduler-verbs.ts): a placement object
  // per stage made the planner work out a need and its key per stage, which the server's pass does not.
  const shapes = catalogue.map((spec) => ({
    key: JSON.stringify(spec),
    spec,
    placement: { region: null, labels: {}, ...(spec.allowGpuMachines ? { allowGpuMachines: true } : {}) },
    queue: [] as QueuedStage[],
  }));
  const weighted = shapes.map((x) => ({ weight: x.spec.weight, x }));
  for (let i = 0; i < n; i++) {
    const s = pick(weighted, rnd).x;
    const id = String(i).padStart(7, '0');
    s.queue.push({
      stageId: `s${id}`,
      jobId: `j${id}`,
      stageName: 'train',
      pool: poolOf(s.spec.resources),
      priority: rnd() < 0.1 ? 10 : 0,
      readySince: i,
      submittedAt: i,
      resources: s.spec.resources,
      placement: s.placement,
      ...(s.spec.team ? { team: s.spec.team } : {}),
    });
  }
  for (const s of shapes) s.queue.sort(compareQueued);
  return shapes.filter((s) => s.queue.length > 0);
}

// ---------------------------------------------------------------- passes

interface Planner {
  /** How deep to read each shape's queue, and the planner to run over those heads (with what the depths found out about the machines). */
  depths: (
    needs: readonly StageNeed[],
    machines: readonly MachineView[],
    cap: number,
  ) => { depths: number[]; plan: (snapshot: SchedulerSnapshot, opts: PlanOptions) => Plan };
}
/** The server's code now: scheduler-pass.ts groups the machines once, for the depths and the planner. */
const NEW: Planner = {
  depths: (needs, machines, cap) => {
    const classes = new StaticClasses(machines);
    return {
      depths: shapeDepths(needs, machines, cap, false, classes),
      plan: (snapshot, opts) => planPlacements(snapshot, { ...opts, staticClasses: classes }),
    };
  },
};
/** The server's code before issue 32: headsToRead per shape over every machine. */
const FROZEN: Planner = {
  depths: (needs, machines, cap) => ({ depths: needs.map((n) => referenceHeadsToRead(n, machines, cap)), plan: referencePlanPlacements }),
};

/**
 * `--versus DIR`: "before" is the server's code in another checkout (`DIR/src/scheduler`, e.g. main
 * in a `git worktree`), run as NEW runs this one's, instead of the frozen planner. A lever's worth
 * is measured against the planner it changes: the frozen planner's passes are four times as long
 * as today's and meet other noise on a shared machine (docs/throughput.md, "Placement at scale").
 */
async function versusPlanner(dir: string): Promise<Planner> {
  const load = (file: string) => import(pathToFileURL(resolve(dir, 'src/scheduler', file)).href);
  const [{ planPlacements: plan }, { shapeDepths: depths }, { StaticClasses: Classes }] = (await Promise.all([
    load('plan-placements.ts'),
    load('shape-depths.ts'),
    load('static-classes.ts'),
  ])) as [{ planPlacements: typeof planPlacements }, { shapeDepths: typeof shapeDepths }, { StaticClasses: typeof StaticClasses }];
  return {
    depths: (needs, machines, cap) => {
      const classes = new Classes(machines);
      return { depths: depths(needs, machines, cap, false, classes), plan: (snapshot, opts) => plan(snapshot, { ...opts, staticClasses: classes }) };
    },
  };
}
const VERSUS = arg('versus', '');
const OLD: Planner = VERSUS === '' ? FROZEN : await versusPlanner(VERSUS);

/** What the server's fullPass does before it applies: shapes → heads → plan. Returns the plan and the heads read. */
function pass(p: Planner, machines: MachineView[], shapes: readonly Shape[], now: number): { plan: Plan; read: number } {
  const queue: QueuedStage[] = [];
  const { depths, plan } = p.depths(
    shapes.map((s) => stageNeed(s.queue[0]!)),
    machines,
    MAX_PLACEMENTS,
  );
  shapes.forEach((s, k) => {
    for (let i = 0; i < depths[k]! && i < s.queue.length; i++) queue.push(s.queue[i]!);
  });
  if (queue.length === 0) return { plan: { placements: [], pending: [] }, read: 0 };
  return { plan: plan({ machines, queue, now }, { maxPlacements: MAX_PLACEMENTS, gangs: true }), read: queue.length };
}

interface Timing {
  ms: number[];
  /** Placements per second of each pass that placed, by wall time. */
  rates: number[];
  /** The same by the process's CPU time: what the pass cost, less the waits of a shared machine. */
  cpuRates: number[];
  /** Stages placed, and CPU milliseconds, over every pass: the run's rate. */
  placed: number;
  cpuMs: number;
}

interface Cell {
  machines: number;
  queued: number;
  shapes: number;
  passes: number;
  placed: number;
  readMean: number;
  drained: boolean;
  heapMiB: number;
  next: Timing;
  old: Timing | null;
  /** Seconds to build the cluster and the queue (not timed in the passes). */
  setupS: number;
}

const median = (xs: readonly number[]) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const quantile = (xs: readonly number[], q: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
};

function runCell(machineCount: number, queued: number): Cell {
  const t0 = performance.now();
  const rnd = seededRandom(SEED * 1_000_003 + machineCount + queued);
  const machines = cluster(machineCount, rnd);
  let shapes = queueOf(queued, rnd);
  const distinct = shapes.length;
  const setupS = (performance.now() - t0) / 1000;
  const byId = new Map(machines.map((m) => [m.id, m]));
  const shapeOf = new Map<string, Shape>();
  for (const s of shapes) for (const q of s.queue) shapeOf.set(q.stageId, s);
  /** Placed stages by the pass at which they end and free their room: 1–8 passes. */
  const ending = new Map<number, PlannedPlacement[]>();
  const next: Timing = { ms: [], rates: [], cpuRates: [], placed: 0, cpuMs: 0 };
  const old: Timing | null = REFERENCE ? { ms: [], rates: [], cpuRates: [], placed: 0, cpuMs: 0 } : null;
  let placed = 0;
  let read = 0;
  let passes = 0;
  const deadline = performance.now() + BUDGET_S * 1000;
  while (shapes.length > 0 && performance.now() < deadline) {
    for (const p of ending.get(passes) ?? []) releaseAllocation(byId.get(p.machineId)!, p);
    ending.delete(passes);
    const now = 1_000_000 + passes * 1000;
    const timed = (p: Planner, t: Timing) => {
      const cpu = process.cpuUsage();
      const s = performance.now();
      const r = pass(p, machines, shapes, now);
      const ms = performance.now() - s;
      const used = process.cpuUsage(cpu);
      t.ms.push(ms);
      t.placed += r.plan.placements.length;
      t.cpuMs += (used.user + used.system) / 1000;
      if (r.plan.placements.length > 0) {
        t.rates.push((r.plan.placements.length * 1000) / ms);
        t.cpuRates.push((r.plan.placements.length * 1e6) / Math.max(1, used.user + used.system));
      }
      return r;
    };
    // Alternate which runs first, so neither always runs after the other's garbage.
    let r: { plan: Plan; read: number };
    if (old === null) r = timed(NEW, next);
    else if (passes % 2 === 0) {
      r = timed(NEW, next);
      check(r.plan, timed(OLD, old).plan, passes);
    } else {
      const o = timed(OLD, old).plan;
      r = timed(NEW, next);
      check(r.plan, o, passes);
    }
    passes += 1;
    read += r.read;
    if (r.plan.placements.length === 0 && ending.size === 0) break;
    const placedIds = new Set<string>();
    for (const p of r.plan.placements) {
      takeAllocation(byId.get(p.machineId)!, p);
      placedIds.add(p.stageId);
      const end = passes + 1 + Math.floor(rnd() * 8);
      ending.set(end, [...(ending.get(end) ?? []), p]);
    }
    placed += placedIds.size;
    const touched = new Set([...placedIds].map((id) => shapeOf.get(id)!));
    for (const s of touched) s.queue = s.queue.filter((q) => !placedIds.has(q.stageId));
    shapes = shapes.filter((s) => s.queue.length > 0);
  }
  return {
    machines: machineCount,
    queued,
    shapes: distinct,
    passes,
    placed,
    readMean: passes ? read / passes : 0,
    drained: shapes.length === 0,
    heapMiB: process.memoryUsage().heapUsed / 2 ** 20,
    next,
    old,
    setupS,
  };
}

/** The two plans of a pass must be equal: the bench measures the same work, and the planner's equivalence at scale. */
function check(a: Plan, b: Plan, at: number): void {
  const x = JSON.stringify(a);
  const y = JSON.stringify(b);
  if (x !== y) throw new Error(`pass ${at}: the planner's plan differs from the reference's (${x.length} vs ${y.length} characters of JSON)`);
}

// ---------------------------------------------------------------- output

const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '–');
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const rate = (t: Timing) => median(t.rates);
const cpuRate = (t: Timing) => median(t.cpuRates);
/** Over the whole run: every stage placed over every pass's time, wall and CPU. */
const runRate = (t: Timing) => (t.placed * 1000) / t.ms.reduce((a, b) => a + b, 0);
const runCpuRate = (t: Timing) => (t.placed * 1000) / t.cpuMs;

function table(cells: readonly Cell[]): string {
  const head = REFERENCE
    ? '| machines | queued | passes | placed | heads read / pass | placements/s | by CPU time | run: placements/s | run: by CPU time | pass p50 ms | pass p99 ms | before: placements/s | before: by CPU time | before: run, by CPU time | before: p50 ms | speed-up | heap MiB |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    : '| machines | queued | passes | placed | heads read / pass | placements/s | by CPU time | run: placements/s | run: by CPU time | pass p50 ms | pass p99 ms | heap MiB |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |';
  const rows = cells.map((c) => {
    const base = `| ${f0(c.machines)} | ${f0(c.queued)} | ${c.passes}${c.drained ? ' (drained)' : ''} | ${f0(c.placed)} | ${f0(c.readMean)} | **${f0(rate(c.next))}** | ${f0(cpuRate(c.next))} | ${f0(runRate(c.next))} | ${f0(runCpuRate(c.next))} | ${f1(median(c.next.ms))} | ${f1(quantile(c.next.ms, 0.99))}`;
    if (c.old === null) return `${base} | ${f0(c.heapMiB)} |`;
    return `${base} | ${f0(rate(c.old))} | ${f0(cpuRate(c.old))} | ${f0(runCpuRate(c.old))} | ${f1(median(c.old.ms))} | ${(median(c.old.ms) / median(c.next.ms)).toFixed(2)}× | ${f0(c.heapMiB)} |`;
  });
  return [head, ...rows].join('\n');
}

/** Two panels, log-scaled x: placements/s against machines (a line per queue length) and against queue length (a line per cluster size). */
function chart(cells: readonly Cell[]): string {
  const W = 460;
  const H = 300;
  const pad = { l: 64, r: 16, t: 34, b: 44 };
  const ys = cells.flatMap((c) => [cpuRate(c.next), ...(c.old ? [cpuRate(c.old)] : [])]).filter(Number.isFinite);
  const yMax = Math.max(25_000, ...ys) * 1.1;
  const colours = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd'];
  const panel = (x0: number, title: string, xOf: (c: Cell) => number, seriesOf: (c: Cell) => number, xLabel: string) => {
    const xs = [...new Set(cells.map(xOf))].sort((a, b) => a - b);
    const series = [...new Set(cells.map(seriesOf))].sort((a, b) => a - b);
    const lx = (x: number) => Math.log10(x);
    const [a, b] = xs.length > 1 ? [lx(xs[0]!), lx(xs[xs.length - 1]!)] : [lx(xs[0]!) - 1, lx(xs[0]!) + 1];
    const px = (x: number) => x0 + pad.l + ((lx(x) - a) / (b - a)) * (W - pad.l - pad.r);
    const py = (y: number) => pad.t + (1 - y / yMax) * (H - pad.t - pad.b);
    let s = `<text x="${x0 + W / 2}" y="18" text-anchor="middle" font-weight="bold">${title}</text>`;
    s += `<line x1="${x0 + pad.l}" y1="${py(0)}" x2="${x0 + W - pad.r}" y2="${py(0)}" stroke="#333"/><line x1="${x0 + pad.l}" y1="${pad.t}" x2="${x0 + pad.l}" y2="${py(0)}" stroke="#333"/>`;
    for (let v = 0; v <= yMax; v += yMax > 100_000 ? 50_000 : 10_000) {
      s += `<line x1="${x0 + pad.l}" y1="${py(v)}" x2="${x0 + W - pad.r}" y2="${py(v)}" stroke="#ddd"/><text x="${x0 + pad.l - 6}" y="${py(v) + 4}" text-anchor="end">${v / 1000}k</text>`;
    }
    s += `<line x1="${x0 + pad.l}" y1="${py(20_000)}" x2="${x0 + W - pad.r}" y2="${py(20_000)}" stroke="#888" stroke-dasharray="2 3"/><text x="${x0 + W - pad.r}" y="${py(20_000) - 4}" text-anchor="end" fill="#666">target 20k/s</text>`;
    for (const x of xs) s += `<text x="${px(x)}" y="${H - pad.b + 16}" text-anchor="middle">${f0(x)}</text>`;
    s += `<text x="${x0 + W / 2}" y="${H - 8}" text-anchor="middle">${xLabel}</text>`;
    series.forEach((k, i) => {
      const pts = cells.filter((c) => seriesOf(c) === k).sort((p, q) => xOf(p) - xOf(q));
      const line = (f: (c: Cell) => number, dash: string) => {
        const p = pts.filter((c) => Number.isFinite(f(c))).map((c) => `${px(xOf(c)).toFixed(1)},${py(f(c)).toFixed(1)}`);
        return `<polyline fill="none" stroke="${colours[i % colours.length]}" stroke-width="2" ${dash} points="${p.join(' ')}"/>${p.map((q) => `<circle cx="${q.split(',')[0]}" cy="${q.split(',')[1]}" r="3" fill="${colours[i % colours.length]}"/>`).join('')}`;
      };
      s += line((c) => cpuRate(c.next), '');
      if (REFERENCE) s += line((c) => (c.old ? cpuRate(c.old) : NaN), 'stroke-dasharray="5 4" opacity="0.6"');
      s += `<text x="${x0 + pad.l + 8}" y="${pad.t + 14 + i * 14}" fill="${colours[i % colours.length]}">${title.includes('machines') ? `${f0(k)} queued` : `${f0(k)} machines`}</text>`;
    });
    return s;
  };
  const body =
    panel(
      0,
      'placements/s (by CPU time) vs machines',
      (c) => c.machines,
      (c) => c.queued,
      'machines (log)',
    ) +
    panel(
      W,
      'placements/s (by CPU time) vs queue length',
      (c) => c.queued,
      (c) => c.machines,
      'queued stages (log)',
    );
  const legend = REFERENCE
    ? `<text x="${W}" y="${H + 14}" text-anchor="middle" fill="#444">solid: the planner now; dashed: ${VERSUS === '' ? 'the planner before issue 32' : `the planner in ${VERSUS}`} (same passes, same run)</text>`
    : '';
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${H + 22}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>${body}${legend}</svg>\n`;
}

function main(): void {
  const started = performance.now();
  const cells: Cell[] = [];
  for (const [m, q] of CELLS) {
    const c = runCell(m, q);
    cells.push(c);
    console.error(
      `${m} machines × ${q} queued: ${c.passes} passes, ${c.placed} placed, ${f0(rate(c.next))} placements/s (${f0(cpuRate(c.next))} by CPU time, run ${f0(runCpuRate(c.next))}; p50 ${f1(median(c.next.ms))} ms, p99 ${f1(quantile(c.next.ms, 0.99))} ms)` +
        (c.old
          ? `; before: ${f0(rate(c.old))} placements/s (${f0(cpuRate(c.old))} by CPU time, run ${f0(runCpuRate(c.old))}; p50 ${f1(median(c.old.ms))} ms)`
          : '') +
        `; setup ${c.setupS.toFixed(1)} s; heap ${f0(c.heapMiB)} MiB`,
    );
  }
  const totalS = (performance.now() - started) / 1000;
  const md = `# Placement at scale: placements per second by cluster size and queue length

Generated by \`npm run bench:placement${QUICK ? ' -- --quick' : ''}\` (\`bench/placement.ts\`) on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC; rewritten by each run, its history is in git. Issue 32's target: ≥ 20,000 placements/s at 10,000 machines × 100,000 queued.

${machineAndCommit(REPO)}
- **Cluster:** synthetic, seed ${SEED}: machine kinds shaped like the Alibaba trace's node list (G2 8-GPU hosts, 2-GPU T4 hosts, CPU-only hosts, P100, V100) plus H100 and A100 8-GPU hosts; ${Math.round((KINDS.filter((k) => k.gpus === 0).reduce((n, k) => n + k.weight, 0) / KINDS.reduce((n, k) => n + k.weight, 0)) * 100)} % CPU-only; racks of 40.
- **Queue:** ${shapeCatalogue().length} distinct shapes (the store's shapes: resources, placement, team): CPU stages of 1–16 cores (some allowed on GPU machines), 1/2/4/8-GPU stages of a type or of any, quarter and half shares of one GPU (some with a GPU memory bound); two teams; one stage in ten at a higher priority.
- **A pass:** what the server's \`fullPass\` does before it applies: per shape with queued stages, how deep to read its queue (\`shapeDepths\`, \`headsToRead\` before), the heads of that shape's queue (in queue order) to that depth, and \`planPlacements\` over them (\`gangs: true\`, ${f0(MAX_PLACEMENTS)} placements at most); no preemption inputs (no attempt is preemptible). The plan is then applied to the machines; each placed stage runs 1–8 passes and frees its room. Passes repeat until the queue drains, nothing is placed nor running, or ${BUDGET_S} s of a cell's passes are spent (both planners' together).
- **Before:** ${VERSUS === '' ? 'the planner before issue 32 (\`test/support/reference-planner/\`, frozen)' : `the server's planner in \`${VERSUS}\` (\`--versus\`)`} ran the same passes in lockstep, each pass timed for each, alternating which goes first; every pass's two plans were equal (the bench stops otherwise).
- **Run:** ${totalS.toFixed(0)} s in all.

${table(cells)}

![placements per second by CPU time against machines and against queue length](placement.svg)

## Definitions

- **placements/s:** a pass's placements over its wall time (depths + heads + plan), median over the passes that placed; **by CPU time:** over the process's CPU time in the pass instead (\`process.cpuUsage\`, the garbage collector's threads included), which the waits of a shared machine do not inflate. **run:** every stage placed in the cell over the sum of its passes' times (passes that placed few, on a full cluster, count too). **pass p50/p99:** over every pass, including those that placed little (a full cluster). **heads read / pass:** the stages the pass read from the queues (what \`queueHeads\` returns), mean over passes: bounded by the room, not the backlog.
- **heap MiB:** \`heapUsed\` after the cell (the queue's stages included; garbage not collected yet counts too).
- **speed-up:** before's p50 pass time over now's.
`;
  console.log(md);
  if (OUT !== '') {
    writeFileSync(resolve(REPO, OUT), md);
    writeFileSync(resolve(REPO, OUT.replace(/\.md$/, '.svg')), chart(cells));
    console.error(`written to ${OUT} and ${OUT.replace(/\.md$/, '.svg')}`);
  }
}

main();
