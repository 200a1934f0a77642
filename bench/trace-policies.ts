/**
 * FIFO, best fit and Gantry's planner side by side on the real Alibaba GPU trace (openb 2023,
 * ../shared/traces/alibaba-gpu-2023): its node list as the cluster, its default pod list arriving
 * `--speedup` times faster (`withArrivalSpeedup`), replayed once per policy through `replayTrace`
 * (the same replay, the same fit checks; only the planner differs, `src/sim/baseline-policies.ts`).
 *
 * Why ×50,000 by default: at trace speed the sample never loads the cluster (1% of GPUs at the
 * peak, nothing waits). At ×20,000 the three policies queue about alike (mean GPU wait ~1.4 s). At
 * ×50,000 the 149 days of arrivals come in ~4.3 minutes, the whole trace asks for more GPUs than
 * the cluster has, and FIFO queues visibly behind its head. ×100,000 shows the same picture and
 * costs ~1.5× the run time.
 *
 * Each policy replays in a child process (`--policy NAME`, prints JSON), `--jobs` at a time: the
 * replays are deterministic, so running them side by side changes only the wall time.
 *
 * Usage: npm run bench:trace [-- --speedup 50000 --pods 8152 --jobs 2 --out FILE (default bench/results/trace-policies.md)]
 */
import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ALIBABA_TRACE_RELATIVE_DIR,
  defaultAlibabaTraceDir,
  hasAlibabaTrace,
  loadAlibabaTrace,
  NODE_LIST_FILE,
  POD_LIST_FILES,
} from '../src/sim/alibaba-trace.js';
import { gpuAllocationRatio, policyFigures, TRACE_POLICIES, type PolicyFigures, type TracePolicyName } from '../src/sim/policy-figures.js';
import { replayTrace, withArrivalSpeedup, type SummaryStats, type UtilisationPoint } from '../src/sim/trace-replay.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const SCRIPT = fileURLToPath(import.meta.url);
const REPO = resolve(SCRIPT, '../..');

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
};
const SPEEDUP = Number(arg('speedup', '50000'));
const PODS = Number(arg('pods', 'Infinity'));
const JOBS = Math.max(1, Number(arg('jobs', String(Math.min(3, cpus().length)))));
const OUT = arg('out', 'bench/results/trace-policies.md');
const POLICY = arg('policy', '');

/** What a child reports for one policy. */
interface PolicyRun {
  policy: TracePolicyName;
  figures: PolicyFigures;
  passes: number;
  totalGpus: number;
  utilisation: UtilisationPoint[];
  wallSeconds: number;
}

function load() {
  const dir = defaultAlibabaTraceDir();
  if (!hasAlibabaTrace(dir)) throw new Error(`trace not found at ${dir} (expected ../shared/traces/alibaba-gpu-2023 beside the repo)`);
  const { machines, pods } = loadAlibabaTrace('default', dir);
  return { dir, machines, pods: withArrivalSpeedup(pods.slice(0, PODS), SPEEDUP) };
}

function runOne(policy: TracePolicyName): PolicyRun {
  const { machines, pods } = load();
  const t0 = performance.now();
  const r = replayTrace(machines, pods, { planner: TRACE_POLICIES[policy].planner });
  const wallSeconds = (performance.now() - t0) / 1000;
  return {
    policy,
    figures: policyFigures(r, pods),
    passes: r.stats.passes,
    totalGpus: r.stats.gpuUtilisation.totalGpus,
    utilisation: r.utilisation,
    wallSeconds,
  };
}

function runChild(policy: TracePolicyName): Promise<PolicyRun> {
  const args = [...process.execArgv, SCRIPT, '--policy', policy, '--speedup', String(SPEEDUP), '--pods', String(PODS)];
  return new Promise((ok, fail) =>
    execFile(process.execPath, args, { cwd: REPO, maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) =>
      err ? fail(new Error(`${policy}: ${err.message}\n${stderr}`)) : ok(JSON.parse(stdout) as PolicyRun),
    ),
  );
}

/** Runs `tasks` with at most `n` at a time, results in task order. */
async function limited<T>(n: number, tasks: (() => Promise<T>)[]): Promise<T[]> {
  const out: T[] = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      out[i] = await tasks[i]!();
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, tasks.length) }, worker));
  return out;
}

function git(...a: string[]): string {
  try {
    return execFileSync('git', a, { cwd: REPO, encoding: 'utf8' }).trim();
  } catch {
    return '?';
  }
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const sec = (x: number | undefined) => (x === undefined ? '–' : `${x.toFixed(1)} s`);
const waits = (s: SummaryStats | null) => [sec(s?.mean), sec(s?.p99)];

async function main() {
  if (POLICY !== '') {
    if (!Object.hasOwn(TRACE_POLICIES, POLICY)) throw new Error(`unknown policy ${POLICY}`);
    process.stdout.write(JSON.stringify(runOne(POLICY as TracePolicyName)));
    return;
  }
  const t0 = performance.now();
  const { machines, pods } = load();
  const names = Object.keys(TRACE_POLICIES) as TracePolicyName[];
  const runs = await limited(
    JOBS,
    names.map((n) => () => runChild(n)),
  );
  const totalSeconds = (performance.now() - t0) / 1000;

  // One window for all three: first arrival to the latest last placement of any policy.
  const start = runs[0]!.figures.busySpan.start;
  const commonEnd = Math.max(...runs.map((r) => r.figures.busySpan.end));
  const f0 = runs[0]!.figures;
  const head = [
    'policy',
    'GPU allocation ratio (own busy span)',
    'busy span',
    `GPU allocation ratio (common window, ${(commonEnd - start).toFixed(0)} s)`,
    `GPU pods: mean wait`,
    'p99 wait',
    `high-priority GPU pods: mean wait`,
    'p99 wait',
    'never placed (GPU pods)',
    'passes',
    'replay wall time',
  ];
  const rows = runs.map((r) => {
    const f = r.figures;
    return [
      TRACE_POLICIES[r.policy].label,
      `**${pct(f.gpuAllocationRatio)}**`,
      `${(f.busySpan.end - f.busySpan.start).toFixed(0)} s`,
      pct(gpuAllocationRatio(r.utilisation, r.totalGpus, start, commonEnd)),
      ...waits(f.gpuWaitSeconds),
      ...waits(f.highPriorityGpuWaitSeconds),
      `${f.neverPlaced} (${f.gpuNeverPlaced})`,
      String(r.passes),
      `${r.wallSeconds.toFixed(1)} s`,
    ];
  });
  const table = [head, head.map(() => '---'), ...rows].map((r) => `| ${r.join(' | ')} |`).join('\n');
  const dirty = git('status', '--porcelain', '--', 'src', 'bench', ':!bench/results') !== '';
  const cpu = cpus();
  const md = `# FIFO, best fit and Gantry on the Alibaba GPU trace, 2026-12-02

Generated by \`npm run bench:trace -- --speedup ${SPEEDUP}${Number.isFinite(PODS) ? ` --pods ${PODS}` : ''}\` (\`bench/trace-policies.ts\`).

- **Machine:** ${process.platform} ${process.arch}, ${cpu.length} cores (${cpu[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; shared with other engineers, so wall times are noisy (the figures are not: every replay is deterministic).
- **Commit:** \`${git('rev-parse', '--short', 'HEAD')}\`${dirty ? ' (with uncommitted changes in src/ or bench/)' : ''}.
- **Trace:** \`${ALIBABA_TRACE_RELATIVE_DIR}\`: cluster = \`${NODE_LIST_FILE}\` (${machines.length} machines, ${runs[0]!.totalGpus} GPUs), pods = \`${POD_LIST_FILES.default}\` (${pods.length} pods, ${f0.gpuPods} asking for GPUs, ${f0.highPriorityGpuPods} of them LS or Guaranteed). A fractional-GPU pod takes one whole GPU.
- **Speedup:** ×${SPEEDUP}: each pod arrives at creation_time / ${SPEEDUP} and holds for as long as it ran in production; the arrivals span ${(pods[pods.length - 1]!.creationTime - pods[0]!.creationTime).toFixed(0)} s.
- **Run:** ${runs.length} replays, ${JOBS} at a time, ${totalSeconds.toFixed(0)} s in all.

${table}

## Definitions

- **Policies.** FIFO: arrival order (creation time, then name), QoS ignored; the first machine in
  name order that fits; when the oldest waiting pod fits nowhere now, nothing behind it is placed
  in that pass (head-of-line blocking). Best fit: arrival order, QoS ignored; a pod that fits
  nowhere is skipped; the machine leaving the fewest GPUs of its type, then the least CPU
  (\`rank.ts\`). Neither holds machines for multi-GPU pods nor keeps GPU machines' CPUs for GPU work.
  Gantry: \`planPlacements\` unchanged (QoS priority Guaranteed > LS > Burstable > BE, best fit, GPU
  machines' CPU reserve, reservations for waiting multi-GPU stages). All three use the same check
  chain (\`checks.ts\`; the baselines without its two GPU-machine checks) and the same replay, which
  re-checks every placement on apply.
- **Busy span** of a replay: from the first pod's arrival to the last pod's placement, [t₀, t_last];
  the time in which the policy had pods to place. After it the cluster only drains, whatever the policy.
- **GPU allocation ratio**: ∫ allocated GPUs dt over the span / (total GPUs × span length), with
  allocated GPUs the step function of the replay (a placed pod's GPUs count from its placement to
  its release). The **common window** is the same ratio over [t₀, the latest t_last of the three],
  one window for all policies.
- **Wait** of a pod: its placement time minus its (sped-up) arrival, over pods that were placed;
  p99 by nearest rank. **High priority**: QoS LS or Guaranteed. **Never placed**: still queued when
  no event was left (pods, and GPU pods in brackets).
`;
  writeFileSync(resolve(REPO, OUT), md);
  console.log(md);
  console.log(`written to ${OUT}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
