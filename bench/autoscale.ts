/**
 * Issue 30's question with numbers: a day of the Alibaba trace replayed (src/sim/autoscale-replay.ts)
 * on a fixed cluster sized for the peak, one sized for the mean, and the autoscaler (pools made
 * from the trace's node list, src/sim/trace-templates.ts), with and without a warm minimum.
 * GPU-hours provisioned and idle, wait of GPU stages, machines started. Deterministic; one run is
 * a few seconds.
 *
 * Usage: npm run bench:autoscale [-- --trace DIR --pods default|gpuspec33 --day N (default: the
 *          busiest) --speedups 1,10 --boot 120 --idle 300 --interval 10 --spare g2:1 --whole-gpus --json --out FILE (default bench/results/autoscale.md, none with --json)]
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PoolTemplate } from '../src/autoscale/pool-template.js';
import {
  defaultAlibabaTraceDir,
  hasAlibabaTrace,
  POD_LIST_FILES,
  readNodeList,
  readPodList,
  type PodListName,
  type TracePod,
} from '../src/sim/alibaba-trace.js';
import { busiestDay, podsOfDay, replayAutoscale, type AutoscaleReplayResult } from '../src/sim/autoscale-replay.js';
import { withArrivalSpeedup } from '../src/sim/trace-replay.js';
import { fixedCluster, templatesFromNodes } from '../src/sim/trace-templates.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const REPO = resolve(fileURLToPath(import.meta.url), '../..');

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
}
function num(name: string, def: number): number {
  const v = Number(arg(name, String(def)));
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a number ≥ 0, got ${arg(name, '')}`);
  return v;
}

const DIR = arg('trace', defaultAlibabaTraceDir());
const LIST = arg('pods', 'default') as PodListName;
const SPEEDUPS = arg('speedups', '1,10').split(',').map(Number);
const BOOT = num('boot', 120);
const IDLE = num('idle', 300);
const INTERVAL = num('interval', 10);
const JSON_OUT = process.argv.includes('--json');
/** Count gpu_milli < 1000 pods as whole GPUs, as before issue 29 (default: as shares of one GPU). */
const WHOLE_GPUS = process.argv.includes('--whole-gpus');
const OUT = arg('out', JSON_OUT ? '' : 'bench/results/autoscale.md');
/** Spare machines per pool for the last row ("g2:1": one idle 8-GPU g2 machine kept ahead of demand). */
const SPARE = Object.fromEntries(
  arg('spare', 'g2:1')
    .split(',')
    .filter((x) => x !== '')
    .map((x) => {
      const [pool, n] = x.split(':');
      if (!pool || !/^\d+$/.test(n ?? '')) throw new Error(`--spare wants POOL:N[,POOL:N], got ${x}`);
      return [pool, Number(n)];
    }),
);
if (!Object.hasOwn(POD_LIST_FILES, LIST)) throw new Error(`unknown pod list ${LIST} (${Object.keys(POD_LIST_FILES).join(', ')})`);
if (!hasAlibabaTrace(DIR)) throw new Error(`trace not found at ${DIR}`);
if (SPEEDUPS.some((s) => !(s > 0) || !Number.isFinite(s))) throw new Error(`--speedups must be numbers above 0, got ${arg('speedups', '')}`);
if (!(INTERVAL > 0)) throw new Error('--interval must be above 0');

const t0 = performance.now();
const nodes = readNodeList(DIR);
const allPods = readPodList(LIST, DIR);
const DAY = arg('day', '') === '' ? busiestDay(allPods) : num('day', 0);
const dayPods = podsOfDay(allPods, DAY);
if (dayPods.length === 0) throw new Error(`no pods on day ${DAY}`);
const bounds = { idleSeconds: IDLE, bootTimeoutSeconds: Math.max(600, BOOT * 5) };
const pools = templatesFromNodes(nodes, bounds);
for (const p of Object.keys(SPARE)) if (!pools.some((t) => t.name === p)) throw new Error(`--spare: no template ${p} (${pools.map((t) => t.name).join(', ')})`);

interface Row {
  name: string;
  detail: string;
  result: AutoscaleReplayResult;
  seconds: number;
}
interface Section {
  speedup: number;
  pods: TracePod[];
  peak: Record<string, number>;
  mean: Record<string, number>;
  rows: Row[];
}

const shape = (count: Record<string, number>) =>
  Object.entries(count)
    .filter(([, n]) => n > 0)
    .map(([p, n]) => `${n} × ${p}`)
    .join(', ');

function section(speedup: number): Section {
  const pods = speedup === 1 ? dayPods : withArrivalSpeedup(dayPods, speedup);
  // Sizing: the day on the whole trace cluster as template machines (every template at its max):
  // nothing waits, and what each pool holds at once is the demand.
  const unlimited = replayAutoscale(pods, {
    wholeGpus: WHOLE_GPUS,
    fixed: fixedCluster(pools, Object.fromEntries(pools.map((p) => [p.name, p.autoscale.max]))),
  });
  const peak = Object.fromEntries(Object.entries(unlimited.pools).map(([k, f]) => [k, f.peakBusy]));
  const mean = Object.fromEntries(Object.entries(unlimited.pools).map(([k, f]) => [k, Math.ceil(f.meanBusyWhileArriving)]));
  const rows: Row[] = [];
  const run = (name: string, detail: string, f: () => AutoscaleReplayResult) => {
    const t = performance.now();
    const result = f();
    rows.push({ name, detail, result, seconds: (performance.now() - t) / 1000 });
  };
  const warm: PoolTemplate[] = templatesFromNodes(nodes, { ...bounds, min: mean });
  run('fixed, sized for the peak', shape(peak), () => replayAutoscale(pods, { wholeGpus: WHOLE_GPUS, fixed: fixedCluster(pools, peak) }));
  run('fixed, sized for the mean', shape(mean), () => replayAutoscale(pods, { wholeGpus: WHOLE_GPUS, fixed: fixedCluster(pools, mean) }));
  run('autoscaler, min 0', `boot ${BOOT} s, idle ${IDLE} s, every ${INTERVAL} s`, () =>
    replayAutoscale(pods, { wholeGpus: WHOLE_GPUS, pools, bootSeconds: BOOT, intervalSeconds: INTERVAL }),
  );
  run('autoscaler, min = the mean-sized cluster', `min ${shape(mean)}`, () =>
    replayAutoscale(pods, { wholeGpus: WHOLE_GPUS, pools: warm, bootSeconds: BOOT, intervalSeconds: INTERVAL }),
  );
  if (Object.keys(SPARE).length > 0) {
    const spare = templatesFromNodes(nodes, { ...bounds, spare: SPARE });
    run('autoscaler, spare machines', `spareMachines ${shape(SPARE)}`, () =>
      replayAutoscale(pods, { wholeGpus: WHOLE_GPUS, pools: spare, bootSeconds: BOOT, intervalSeconds: INTERVAL }),
    );
  }
  return { speedup, pods, peak, mean, rows };
}

const sections = SPEEDUPS.map(section);
const totalSeconds = (performance.now() - t0) / 1000;

const h = (gpuSeconds: number) => gpuSeconds / 3600;
const f1 = (x: number) => x.toFixed(1);
const gpus = (count: Record<string, number>) => pools.reduce((s, p) => s + (p.template.gpus?.count ?? 0) * (count[p.name] ?? 0), 0);

function markdown(s: Section): string {
  const base = s.rows[0]!.result;
  const head = ['cluster', 'machines', 'GPU-h provisioned', 'GPU-h idle', 'vs peak', 'mean wait', 'p99 wait', 'max wait', 'placed', 'wall'];
  const lines = [head, head.map(() => '---')];
  for (const [i, r] of s.rows.entries()) {
    const x = r.result;
    const w = x.gpuWaitSeconds;
    lines.push([
      `${r.name} (${r.detail})`,
      i < 2 ? String(Object.values(i === 0 ? s.peak : s.mean).reduce((a, b) => a + b, 0)) : `${x.machinesStarted} started`,
      f1(h(x.gpuSecondsProvisioned)),
      `${f1(h(x.gpuSecondsProvisioned - x.gpuSecondsAllocated))} (${((1 - x.gpuSecondsAllocated / x.gpuSecondsProvisioned) * 100).toFixed(0)} %)`,
      `${((x.gpuSecondsProvisioned / base.gpuSecondsProvisioned - 1) * 100).toFixed(0)} %`,
      w ? `${f1(w.mean)} s` : '–',
      w ? `${f1(w.p99)} s` : '–',
      w ? `${f1(w.max)} s` : '–',
      `${x.placed}/${x.pods}`,
      `${r.seconds.toFixed(1)} s`,
    ]);
  }
  const goals = s.rows.slice(2).map((r) => {
    const p99 = r.result.gpuWaitSeconds?.p99 ?? 0;
    const baseP99 = base.gpuWaitSeconds?.p99 ?? 0;
    const fewer = 1 - r.result.gpuSecondsProvisioned / base.gpuSecondsProvisioned;
    return `- **${r.name}:** p99 wait ${f1(p99)} s against 1.2 × ${f1(baseP99)} s: **${p99 <= 1.2 * baseP99 ? 'met' : 'missed'}**; GPU-hours ${(fewer * 100).toFixed(0)} % fewer than the peak-sized cluster (goal ≥ 30 %): **${fewer >= 0.3 ? 'met' : 'missed'}**.`;
  });
  const started = s.rows.slice(2).map((r) => `- ${r.name}: ${shape(Object.fromEntries(Object.entries(r.result.pools).map(([k, f]) => [k, f.started])))}`);
  const a = s.rows[2]!.result;
  const sample = a.decisions.slice(0, 4).map((d) => `  - t+${f1(d.time - a.startTime)} s: ${d.reason}`);
  return `## ${s.speedup === 1 ? 'The day as it came' : `Arrivals ${s.speedup}× faster`}

${s.pods.length} pods (${s.pods.filter((p) => p.stage.resources.gpu).length} with GPUs) arriving over ${f1(h(a.lastArrival - a.startTime))} h; peak-sized cluster ${gpus(s.peak)} GPUs, mean-sized ${gpus(s.mean)} GPUs.

| ${lines.map((l) => l.join(' | ')).join(' |\n| ')} |

${goals.join('\n')}

Machines started per template:
${started.join('\n')}

The autoscaler's first decisions:
${sample.join('\n')}
`;
}

if (JSON_OUT) {
  const out = sections.map((s) => ({
    ...s,
    pods: s.pods.length,
    rows: s.rows.map((r) => ({ ...r, result: { ...r.result, decisions: r.result.decisions.length } })),
  }));
  process.stdout.write(`${JSON.stringify({ day: DAY, pools, sections: out, totalSeconds }, null, 2)}\n`);
} else {
  const git = (...a: string[]) => {
    try {
      return execFileSync('git', a, { cwd: REPO, encoding: 'utf8' }).trim();
    } catch {
      return '?';
    }
  };
  const dirty = git('status', '--porcelain', '--', 'src', 'bench', ':!bench/results') !== '';
  const cpu = cpus();
  const md = `# Autoscaling on a day of the Alibaba trace

Generated by \`npm run bench:autoscale\` (\`bench/autoscale.ts\`, \`src/sim/autoscale-replay.ts\`).

- **Machine:** ${process.platform} ${process.arch}, ${cpu.length} cores (${cpu[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; the figures are deterministic, the wall times noisy.
- **Commit:** \`${git('rev-parse', '--short', 'HEAD')}\`${dirty ? ' (with uncommitted changes in src/ or bench/)' : ''}.
- **Workload:** day ${DAY} (the busiest in GPU pods) of \`${POD_LIST_FILES[LIST]}\`, each pod holding what it got for as long as it ran in production; ${WHOLE_GPUS ? 'GPU shares counted as whole GPUs (`--whole-gpus`, as before issue 29)' : 'a pod with `gpu_milli` below 1000 asks for that share of one GPU (GPU-hours allocated count its part)'}; GPUs of every model counted alike.
- **Placement:** the real \`planPlacements\`, GPU stages through the share planner with its default policy, FGD (docs/scheduling.md, "Placement of shares"); a started machine joins held for the stages it was started for.
- **Templates** (from \`openb_node_list_all_node.csv\`, one per GPU model at its largest shape, max = the trace's nodes of that model): ${pools.map((p) => `${p.name} ${p.template.gpus ? `${p.template.gpus.count} GPU${p.template.gpus.count === 1 ? '' : 's'}` : 'no GPU'} (max ${p.autoscale.max})`).join(', ')}.
- **Sizing:** the day replayed with every template at its max (nothing waits): the most machines of each pool holding work at once is the peak-sized cluster, the time-weighted mean while pods arrive, rounded up, the mean-sized one.
- **Autoscaler:** \`planScaleUp\` and \`planScaleDown\` every ${INTERVAL} s, machines join ${BOOT} s after their start, idle ${IDLE} s before draining. GPU-hours provisioned run from the first arrival to the last departure for a fixed cluster, from the start (boot included) to the release for a started machine.
- **Run:** ${totalSeconds.toFixed(1)} s in all.

${sections.map(markdown).join('\n')}`;
  console.log(md);
  if (OUT !== '') {
    writeFileSync(resolve(REPO, OUT), md);
    console.log(`written to ${OUT}`);
  }
}
