/**
 * The FGD paper's experiment as one run: policies × pod lists × seeds of `replayShares`, the
 * figures at the paper's arrived workloads and a curve for charts, means over seeds, and the
 * paper's own figures beside them. `gantry sim` and `npm run bench:fgd` both run it through here
 * (docs/scheduling.md, "The paper's experiment"), so the command and the bench cannot disagree.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SharePolicyName } from '../scheduler/share-policies.js';
import { targetWorkload } from '../scheduler/target-workload.js';
import { NODE_LIST_FILE, POD_LIST_FILES, readNodeList, readPodList, type PodListName } from './alibaba-trace.js';
import { allocatedPercentCurve, clusterGpuMilli, gpuShareMachines, replayShares, shareRequestOf } from './share-replay.js';

/** The arrived workloads (% of the cluster's GPUs) the paper reports. */
export const ARRIVED = [90, 95, 100, 110, 130] as const;

/** The arrived workloads of a run's curve: every 1 % from 50 % (below it every policy places everything) to 130 %. */
export const CURVE_ARRIVED: readonly number[] = Array.from({ length: 81 }, (_, i) => 50 + i);

/**
 * The paper's unallocated GPU % (100 − allocated) at each of ARRIVED, mean of seeds 42–51, from
 * hkust-adsl/kubernetes-scheduler-simulator, experiments/analysis/expected_results/analysis_allo_discrete.csv.
 */
export const PAPER_UNALLOCATED: Record<PodListName, Record<string, readonly number[]>> = {
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

/**
 * The paper's name for the policy a Gantry policy reproduces (`best-fit` → `BestFit`), or null.
 * By spelling, not by a table of Gantry's names, so a policy added to share-policies.ts under the
 * paper's name (`dotprod`, `random`), or as `<paper name>-paper` (`fgd-paper`), finds its figures without an edit here.
 */
export function paperPolicyOf(policy: string): string | null {
  const key = policy
    .replace(/-paper$/, '')
    .replace(/-/g, '')
    .toLowerCase();
  return Object.keys(PAPER_UNALLOCATED.default).find((name) => name.toLowerCase() === key) ?? null;
}

/** One seed's replay, read out. Null: no point of the run near that arrived % (a run that stopped short). */
export interface SeedFigures {
  seed: number;
  /** Pods that arrived (the list grown to 1.3 × the cluster) and those that fit nowhere. */
  pods: number;
  dropped: number;
  /** Unallocated GPU % at each of ARRIVED. */
  unallocated: (number | null)[];
  /** Unallocated GPU % at each of CURVE_ARRIVED. */
  curve: (number | null)[];
  /** The replay's own time (not the trace's loading): wall time, so it varies from run to run. */
  seconds: number;
}

/** One policy on one pod list, every seed. */
export interface PolicyRun {
  list: PodListName;
  policy: SharePolicyName;
  /** Mean over seeds at each of ARRIVED (null where a seed has none). */
  unallocated: (number | null)[];
  /** Mean over seeds at each of CURVE_ARRIVED. */
  curve: (number | null)[];
  perSeed: SeedFigures[];
  /** The replays' own time, summed over seeds (and so over the processes that ran them). */
  wallSeconds: number;
}

export interface ListInfo {
  list: PodListName;
  file: string;
  /** Distinct request shapes of FGD's target workload (the pod list before it grows). */
  targetShapes: number;
  /** The paper's unallocated GPU % at ARRIVED, by its policy name. */
  paper: Record<string, readonly number[]>;
}

/** What `gantry sim --json` and `npm run bench:fgd -- --json` print. */
export interface ShareExperiment {
  trace: string;
  arrived: readonly number[];
  curveArrived: readonly number[];
  seeds: number[];
  policies: SharePolicyName[];
  machines: number;
  gpus: number;
  lists: ListInfo[];
  /** Per list, per policy, in the order asked. */
  runs: PolicyRun[];
  /** Child processes run (0: in this process) and how many at a time. */
  processes: number;
  jobs: number;
  totalSeconds: number;
}

export interface ShareExperimentOptions {
  traceDir: string;
  lists: readonly PodListName[];
  policies: readonly SharePolicyName[];
  seeds: readonly number[];
  /** Child processes at a time; 1 runs everything in this process. */
  jobs: number;
  /** After each seed's replay, wherever it ran. */
  onSeed?: (p: { list: PodListName; policy: SharePolicyName; seed: number; done: number; total: number }) => void;
}

/** The files a run of these lists reads; the first missing one, or null. */
export function missingTraceFile(traceDir: string, lists: readonly PodListName[]): string | null {
  return [NODE_LIST_FILE, ...lists.map((l) => POD_LIST_FILES[l])].find((f) => !existsSync(join(traceDir, f))) ?? null;
}

const nullable = (x: number) => (Number.isNaN(x) ? null : x);

/** One list × policy over seeds in this process; `onSeed` after each. */
export function runPolicySeeds(
  traceDir: string,
  list: PodListName,
  policy: SharePolicyName,
  seeds: readonly number[],
  onSeed: (s: SeedFigures) => void = () => {},
): SeedFigures[] {
  const machines = gpuShareMachines(readNodeList(traceDir));
  const pods = readPodList(list, traceDir);
  const workload = targetWorkload(pods.map(shareRequestOf));
  return seeds.map((seed) => {
    const start = performance.now();
    const r = replayShares(machines, pods, { policy, seed, workload });
    const at = allocatedPercentCurve(r, [...ARRIVED, ...CURVE_ARRIVED]).map((a) => nullable(100 - a));
    const seconds = (performance.now() - start) / 1000;
    const s: SeedFigures = { seed, pods: r.pods, dropped: r.dropped, unallocated: at.slice(0, ARRIVED.length), curve: at.slice(ARRIVED.length), seconds };
    onSeed(s);
    return s;
  });
}

/** The mean over seeds at each point; null where any seed has none. */
function meanOf(rows: readonly (number | null)[][], width: number): (number | null)[] {
  return Array.from({ length: width }, (_, i) => {
    let sum = 0;
    for (const r of rows) {
      const x = r[i];
      if (x === null || x === undefined) return null;
      sum += x;
    }
    return rows.length === 0 ? null : sum / rows.length;
  });
}

interface Task {
  list: PodListName;
  policy: SharePolicyName;
  seeds: number[];
}

/** The child that runs a task (`share-experiment-child`), beside this file: .ts from the sources (through tsx), .js built. */
function childEntry(): { file: string; execArgv: string[] } {
  const ts = import.meta.url.endsWith('.ts');
  const file = fileURLToPath(new URL(`./share-experiment-child.${ts ? 'ts' : 'js'}`, import.meta.url));
  const execArgv = ts && !process.execArgv.some((a) => a.includes('tsx')) ? [...process.execArgv, '--import', 'tsx'] : process.execArgv;
  return { file, execArgv };
}

/**
 * A task in a child process: one JSON line per seed on its stdout. Should this process die, the
 * child sees its parent gone after its seed and ends (share-experiment-child.ts): it outlives this
 * process by one seed's replay at the most.
 */
function runChild(traceDir: string, t: Task, onSeed: (s: SeedFigures) => void): Promise<SeedFigures[]> {
  const { file, execArgv } = childEntry();
  const repo = fileURLToPath(new URL('../..', import.meta.url));
  const proc = spawn(process.execPath, [...execArgv, file, JSON.stringify({ traceDir, ...t })], { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] });
  const out: SeedFigures[] = [];
  let pending = '';
  let stderr = '';
  let garbled: string | null = null;
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (d: string) => {
    pending += d;
    for (let nl = pending.indexOf('\n'); nl >= 0 && garbled === null; nl = pending.indexOf('\n')) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      try {
        const s = JSON.parse(line) as SeedFigures;
        out.push(s);
        onSeed(s);
      } catch {
        // Not a figure (something else wrote to its stdout): its figures cannot be trusted.
        garbled = line.slice(0, 200);
        proc.kill();
      }
    }
  });
  proc.stderr.on('data', (d) => (stderr += d));
  return new Promise((ok, fail) => {
    proc.on('error', fail);
    proc.on('close', (code, signal) => {
      if (code === 0 && garbled === null && out.length === t.seeds.length) return ok(out);
      const why = garbled !== null ? `printed "${garbled}", not a seed's figures` : `ended with ${signal ?? code}`;
      fail(new Error(`${t.list} ${t.policy}: the replay's process ${why}${stderr ? `:\n${stderr.trim()}` : ''}`));
    });
  });
}

/**
 * Every list × policy × seed. With `jobs` > 1 in child processes, that many at a time, each
 * list × policy with its seeds in halves so that the slow ones (FGD, gpuspec33) do not leave a core
 * idle at the end; the replays are deterministic, so only the wall time depends on how.
 */
export async function runShareExperiment(opts: ShareExperimentOptions): Promise<ShareExperiment> {
  const t0 = performance.now();
  const machines = gpuShareMachines(readNodeList(opts.traceDir));
  const lists: ListInfo[] = opts.lists.map((list) => ({
    list,
    file: POD_LIST_FILES[list],
    targetShapes: targetWorkload(readPodList(list, opts.traceDir).map(shareRequestOf)).shapes.length,
    paper: PAPER_UNALLOCATED[list],
  }));
  const total = opts.lists.length * opts.policies.length * opts.seeds.length;
  let done = 0;
  const seedDone = (t: Task) => (s: SeedFigures) => opts.onSeed?.({ list: t.list, policy: t.policy, seed: s.seed, done: ++done, total });

  const inProcess = opts.jobs <= 1;
  const half = Math.ceil(opts.seeds.length / 2);
  const parts = inProcess ? [[...opts.seeds]] : [opts.seeds.slice(0, half), opts.seeds.slice(half)].filter((p) => p.length > 0);
  // Longest first (FGD, then the list with GPU types, measured about 3× and 1.5× the others).
  const cost = (t: Task) => (t.policy === 'fgd' ? 3 : 1) * (t.list === 'gpuspec33' ? 1.5 : 1);
  const tasks: Task[] = opts.lists.flatMap((list) => opts.policies.flatMap((policy) => parts.map((seeds) => ({ list, policy, seeds }))));
  if (!inProcess) tasks.sort((a, b) => cost(b) - cost(a));
  const results: SeedFigures[][] = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      const t = tasks[i]!;
      // In this process a task is synchronous; yielding first lets a progress display draw.
      const figures = inProcess
        ? await new Promise<SeedFigures[]>((ok) => setImmediate(() => ok(runPolicySeeds(opts.traceDir, t.list, t.policy, t.seeds, seedDone(t)))))
        : await runChild(opts.traceDir, t, seedDone(t));
      results[i] = figures;
    }
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, opts.jobs), tasks.length) }, worker));

  const runs: PolicyRun[] = opts.lists.flatMap((list) =>
    opts.policies.map((policy) => {
      const mine = tasks.flatMap((t, i) => (t.list === list && t.policy === policy ? [results[i]!] : []));
      const bySeed = new Map(mine.flat().map((s) => [s.seed, s]));
      const perSeed = opts.seeds.map((seed) => bySeed.get(seed)!);
      return {
        list,
        policy,
        unallocated: meanOf(
          perSeed.map((s) => s.unallocated),
          ARRIVED.length,
        ),
        curve: meanOf(
          perSeed.map((s) => s.curve),
          CURVE_ARRIVED.length,
        ),
        perSeed,
        wallSeconds: perSeed.reduce((sum, s) => sum + s.seconds, 0),
      };
    }),
  );
  return {
    trace: opts.traceDir,
    arrived: ARRIVED,
    curveArrived: CURVE_ARRIVED,
    seeds: [...opts.seeds],
    policies: [...opts.policies],
    machines: machines.length,
    gpus: clusterGpuMilli(machines) / 1000,
    lists,
    runs,
    processes: inProcess ? 0 : tasks.length,
    jobs: inProcess ? 1 : Math.min(opts.jobs, tasks.length),
    totalSeconds: (performance.now() - t0) / 1000,
  };
}
