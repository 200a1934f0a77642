/**
 * The FGD paper's experiment (Weng et al., USENIX ATC '23, "Beware of Fragmentation") replayed with
 * Gantry's share planner (`src/sim/share-replay.ts`; docs/scheduling.md, "The paper's experiment"):
 * unallocated GPU % at an arrived workload of 90–130 % of the cluster's GPUs, mean over seeds,
 * beside the paper's own figures.
 *
 * Usage: npm run bench:fgd [-- --trace DIR --pods default,gpuspec33 --seeds 42-51
 *          --policies fgd,fgd-paper,best-fit,packing,random,dotprod,clustering --jobs 2 --json --out bench/results/FILE.md]
 */
import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultAlibabaTraceDir, hasAlibabaTrace, POD_LIST_FILES, readNodeList, readPodList, type PodListName } from '../src/sim/alibaba-trace.js';
import { allocatedPercentAt, clusterGpuMilli, gpuShareMachines, replayShares, shareRequestOf } from '../src/sim/share-replay.js';
import { DEFAULT_SHARE_POLICY, isSharePolicy, SHARE_POLICIES, type SharePolicyName } from '../src/scheduler/share-policies.js';
import { targetWorkload } from '../src/scheduler/target-workload.js';

const SCRIPT = fileURLToPath(import.meta.url);
const REPO = resolve(SCRIPT, '../..');
const ARRIVED = [90, 95, 100, 110, 130] as const;

/**
 * The paper's unallocated GPU % (100 − allocated), mean of seeds 42–51, from
 * hkust-adsl/kubernetes-scheduler-simulator, experiments/analysis/expected_results/analysis_allo_discrete.csv.
 */
const PAPER: Record<PodListName, Record<string, readonly number[]>> = {
  default: {
    Random: [14.98, 14.28, 13.7, 13.12, 12.53],
    DotProd: [10.02, 9.42, 9.38, 9.3, 9.15],
    Clustering: [10.02, 8.4, 8.35, 8.27, 8.12],
    Packing: [10.02, 8.26, 8.22, 8.15, 8.0],
    BestFit: [10.01, 7.18, 7.14, 7.06, 6.92],
    FGD: [10.02, 5.09, 4.77, 4.7, 4.61],
  },
  gpuspec33: {
    Random: [22.6, 19.13, 16.13, 14.45, 13.54],
    DotProd: [27.4, 23.76, 20.18, 12.88, 10.86],
    Clustering: [26.13, 22.5, 18.91, 11.6, 7.88],
    Packing: [25.0, 21.37, 17.78, 10.47, 6.78],
    BestFit: [26.9, 23.2, 19.6, 12.3, 6.91],
    FGD: [19.38, 15.75, 12.16, 5.57, 5.45],
  },
};
/** The paper's policy each of Gantry's reproduces. */
const PAPER_NAME: Record<SharePolicyName, string> = {
  fgd: 'FGD',
  'fgd-paper': 'FGD',
  'best-fit': 'BestFit',
  packing: 'Packing',
  random: 'Random',
  dotprod: 'DotProd',
  clustering: 'Clustering',
};

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
}

function parseSeeds(text: string): number[] {
  return text.split(',').flatMap((part) => {
    const m = /^(\d+)-(\d+)$/.exec(part.trim());
    if (m === null) return [Number(part)];
    const out: number[] = [];
    for (let s = Number(m[1]); s <= Number(m[2]); s++) out.push(s);
    return out;
  });
}

const DIR = arg('trace', defaultAlibabaTraceDir());
const LISTS = arg('pods', 'default,gpuspec33').split(',') as PodListName[];
const SEEDS = parseSeeds(arg('seeds', '42-51'));
const POLICIES = arg('policies', SHARE_POLICIES.join(',')).split(',');
const JSON_OUT = process.argv.includes('--json');
const OUT = arg('out', '');
const JOBS = Math.max(1, Number(arg('jobs', String(Math.min(2, cpus().length)))));

for (const l of LISTS) if (!Object.hasOwn(POD_LIST_FILES, l)) throw new Error(`unknown pod list ${l} (${Object.keys(POD_LIST_FILES).join(', ')})`);
for (const p of POLICIES) if (!isSharePolicy(p)) throw new Error(`unknown policy ${p} (${SHARE_POLICIES.join(', ')})`);
if (SEEDS.some((s) => !Number.isInteger(s))) throw new Error(`bad --seeds ${arg('seeds', '')}`);
if (!hasAlibabaTrace(DIR)) throw new Error(`trace not found at ${DIR}`);

interface Row {
  list: PodListName;
  policy: SharePolicyName;
  /** Mean unallocated GPU % at each of ARRIVED. */
  unallocated: number[];
  perSeed: { seed: number; unallocated: number[]; pods: number; dropped: number }[];
  wallSeconds: number;
}

/** One list × policy × seeds: what a child process computes and prints as JSON. */
function runTask(list: PodListName, policy: SharePolicyName, seeds: readonly number[]): Row {
  const machines = gpuShareMachines(readNodeList(DIR));
  const pods = readPodList(list, DIR);
  const workload = targetWorkload(pods.map(shareRequestOf));
  const t = performance.now();
  const perSeed = seeds.map((seed) => {
    const r = replayShares(machines, pods, { policy, seed, workload });
    return { seed, unallocated: ARRIVED.map((a) => 100 - allocatedPercentAt(r, a)), pods: r.pods, dropped: r.dropped };
  });
  return { list, policy, unallocated: [], perSeed, wallSeconds: (performance.now() - t) / 1000 };
}

function runChild(list: PodListName, policy: SharePolicyName, seeds: readonly number[]): Promise<Row> {
  const args = [...process.execArgv, SCRIPT, '--task', `${list}:${policy}`, '--seeds', seeds.join(','), '--trace', DIR];
  return new Promise((ok, fail) =>
    execFile(process.execPath, args, { cwd: REPO, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) =>
      err ? fail(new Error(`${list} ${policy}: ${err.message}\n${stderr}`)) : ok(JSON.parse(stdout) as Row),
    ),
  );
}

const TASK = arg('task', '');
if (TASK !== '') {
  const [list, policy] = TASK.split(':') as [PodListName, SharePolicyName];
  process.stdout.write(JSON.stringify(runTask(list, policy, SEEDS)));
  process.exit(0);
}

const t0 = performance.now();
const machines = gpuShareMachines(readNodeList(DIR));
const workloads: Record<string, number> = {};
for (const list of LISTS) workloads[list] = targetWorkload(readPodList(list, DIR).map(shareRequestOf)).shapes.length;
// Each list × policy in child processes, --jobs at a time, the seeds split in halves so that the
// slow ones (FGD, gpuspec33) do not leave a core idle at the end: the replays are deterministic,
// so only the wall time depends on it.
const half = Math.ceil(SEEDS.length / 2);
const parts = [SEEDS.slice(0, half), SEEDS.slice(half)].filter((p) => p.length > 0);
// Longest first (FGD, then the list with GPU types, measured about 3× and 1.5× the others).
const cost = (t: { list: PodListName; policy: SharePolicyName }) =>
  (t.policy.startsWith('fgd') ? 3 : t.policy === 'random' ? 2 : 1) * (t.list === 'gpuspec33' ? 1.5 : 1);
const tasks = LISTS.flatMap((list) => (POLICIES as SharePolicyName[]).flatMap((policy) => parts.map((seeds) => ({ list, policy, seeds })))).sort(
  (a, b) => cost(b) - cost(a),
);
const done: Row[] = new Array(tasks.length);
let next = 0;
await Promise.all(
  Array.from({ length: Math.min(JOBS, tasks.length) }, async () => {
    while (next < tasks.length) {
      const i = next++;
      const t = tasks[i]!;
      done[i] = await runChild(t.list, t.policy, t.seeds);
      if (!JSON_OUT) console.error(`${t.list} ${t.policy} seeds ${t.seeds.join(',')}: ${done[i].wallSeconds.toFixed(1)} s`);
    }
  }),
);
const rows: Row[] = LISTS.flatMap((list) =>
  (POLICIES as SharePolicyName[]).map((policy) => {
    const mine = done.filter((r) => r.list === list && r.policy === policy);
    const perSeed = mine.flatMap((r) => r.perSeed);
    const unallocated = ARRIVED.map((_, i) => perSeed.reduce((s, x) => s + x.unallocated[i]!, 0) / perSeed.length);
    return { list, policy, unallocated, perSeed, wallSeconds: mine.reduce((s, r) => s + r.wallSeconds, 0) };
  }),
);
const totalSeconds = (performance.now() - t0) / 1000;

if (JSON_OUT) {
  process.stdout.write(
    `${JSON.stringify({ arrived: ARRIVED, seeds: SEEDS, machines: machines.length, gpus: clusterGpuMilli(machines) / 1000, rows, totalSeconds }, null, 2)}\n`,
  );
} else {
  const f = (x: number) => x.toFixed(2);
  const tables = LISTS.map((list) => {
    const head = ['policy', ...ARRIVED.map((a) => `${a} %`), 'wall'];
    const lines = [head, head.map(() => '---')];
    for (const r of rows.filter((x) => x.list === list)) {
      lines.push([
        `Gantry \`${r.policy}\`${r.policy === DEFAULT_SHARE_POLICY ? ' (default)' : ''} (the paper's ${PAPER_NAME[r.policy]})`,
        ...r.unallocated.map((u) => `**${f(u)}**`),
        `${r.wallSeconds.toFixed(1)} s`,
      ]);
    }
    for (const [name, values] of Object.entries(PAPER[list])) lines.push([`paper ${name}`, ...values.map(f), '']);
    return `### \`${POD_LIST_FILES[list]}\` (target workload: ${workloads[list]} shapes)\n\n${lines.map((l) => `| ${l.join(' | ')} |`).join('\n')}`;
  });
  const git = (...a: string[]) => {
    try {
      return execFileSync('git', a, { cwd: REPO, encoding: 'utf8' }).trim();
    } catch {
      return '?';
    }
  };
  const dirty = git('status', '--porcelain', '--', 'src', 'bench', ':!bench/results') !== '';
  const cpu = cpus();
  const md = `# FGD's experiment with Gantry's share planner

Generated by \`npm run bench:fgd\` (\`bench/fgd.ts\`). Unallocated GPU % (100 − allocated) at an
arrived workload of ${ARRIVED.join(', ')} % of the cluster's GPUs, mean of seeds ${SEEDS[0]}–${SEEDS[SEEDS.length - 1]} (${SEEDS.length}); lower is better.

- **Machine:** ${process.platform} ${process.arch}, ${cpu.length} cores (${cpu[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; shared, so wall times are noisy (the figures are deterministic).
- **Commit:** \`${git('rev-parse', '--short', 'HEAD')}\`${dirty ? ' (with uncommitted changes in src/ or bench/)' : ''}.
- **Cluster:** the ${machines.length} GPU machines of \`openb_node_list_all_node.csv\`, ${clusterGpuMilli(machines) / 1000} GPUs.
- **Run:** ${rows.length} policy × list runs of ${SEEDS.length} seeds in ${tasks.length} child processes, ${JOBS} at a time: ${totalSeconds.toFixed(1)} s in all (wall column: the replays' own time, summed over its children).

${tables.join('\n\n')}
`;
  console.log(md);
  if (OUT !== '') {
    writeFileSync(resolve(REPO, OUT), md);
    console.log(`written to ${OUT}`);
  }
}
