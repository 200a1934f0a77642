/**
 * What `--sandbox` adds to the start and end of every attempt (docs/containment.md, "The
 * sandbox"): the wall time of `true` started from Node, as uid 61184 through setpriv (as the
 * launcher drops to an attempt's user), then under bubblewrap with an attempt's own argv
 * (sandboxArgv: user, pid, IPC and, without the network, network namespaces; the mounts), without
 * and with the network. The kinds take turns, so that noise on a shared machine falls on all.
 * Needs root and bubblewrap.
 * Usage: node --import tsx bench/sandbox-cost.ts [-- --runs 50]
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { findSandbox } from '../src/agent/contain/find-sandbox.js';
import { sandboxArgv, type SandboxAttempt } from '../src/agent/contain/sandbox-argv.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const i = process.argv.indexOf('--runs');
const RUNS = i > 0 ? Number(process.argv[i + 1]) : 50;
const UID = 61184;
const SETPRIV = ['setpriv', `--reuid=${UID}`, `--regid=${UID}`, '--clear-groups', '--no-new-privs'];

const SETPRIV_ONLY = '`setpriv … true`';
const NO_NET = '`setpriv … bwrap … true`, no network';
const NET = '`setpriv … bwrap … true`, `network: true`';

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/**
 * CPU time (user + system) a run costs, all its processes together: the children's total that
 * bash's `times` reports after RUNS runs in a row. Less sensitive than wall time to the other work
 * of a shared machine, which delays a run without charging it CPU.
 */
function cpuPerRun(argv: string[]): number {
  const r = spawnSync('bash', ['-c', `for i in $(seq ${RUNS}); do "$@" > /dev/null || exit 1; done; times`, 'bash', ...argv], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${argv.join(' ')}: exit ${String(r.status)}`);
  const children = r.stdout.trim().split('\n')[1] ?? '';
  const seconds = [...children.matchAll(/(\d+)m([\d.]+)s/g)].reduce((sum, m) => sum + Number(m[1]) * 60 + Number(m[2]), 0);
  return (seconds * 1000) / RUNS;
}

function timed(argv: string[]): number {
  const t0 = performance.now();
  const r = spawnSync(argv[0]!, argv.slice(1), { stdio: 'ignore' });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`${argv.join(' ')}: exit ${String(r.status)}`);
  return ms;
}

if (process.getuid?.() !== 0) throw new Error('run as root: the sandbox is timed as uid 61184 through setpriv');
const found = findSandbox({ user: { uid: UID, gid: UID } });
if ('problem' in found) throw new Error(found.problem);
const base = mkdtempSync('/var/tmp/gantry-sandbox-bench-');
try {
  chmodSync(base, 0o711);
  for (const d of ['work', 'output', 'input']) {
    mkdirSync(join(base, d));
    chownSync(join(base, d), UID, UID);
  }
  const attempt: SandboxAttempt = {
    tool: found,
    gpuIndices: [0],
    dirs: { work: join(base, 'work'), output: join(base, 'output'), input: join(base, 'input'), checkpoint: null, progressFile: join(base, 'progress.jsonl') },
    network: false,
  };
  const kinds: Record<string, string[]> = {
    '`true`': ['/bin/true'],
    [SETPRIV_ONLY]: [...SETPRIV, 'true'],
    [NO_NET]: [...SETPRIV, ...sandboxArgv(attempt), 'true'],
    [NET]: [...SETPRIV, ...sandboxArgv({ ...attempt, network: true }), 'true'],
  };
  const times: Record<string, number[]> = Object.fromEntries(Object.keys(kinds).map((k) => [k, []]));
  for (const argv of Object.values(kinds)) timed(argv); // warm the page cache
  for (let run = 0; run < RUNS; run++) for (const [k, argv] of Object.entries(kinds)) times[k]!.push(timed(argv));

  const version = spawnSync(found.bwrap, ['--version'], { encoding: 'utf8' }).stdout.trim();
  const cpu = Object.fromEntries(Object.entries(kinds).map(([k, argv]) => [k, cpuPerRun(argv)]));
  const rows = Object.entries(times).map(([k, xs]) => `| ${k} | ${median(xs).toFixed(2)} ms | ${pct(xs, 90).toFixed(2)} ms | ${cpu[k]!.toFixed(2)} ms |`);
  const bwrapOwn = median(times[NO_NET]!) - median(times[SETPRIV_ONLY]!);
  const bwrapNet = median(times[NET]!) - median(times[SETPRIV_ONLY]!);
  console.log(
    [
      `${RUNS} runs of each, taking turns; ${version}, Linux ${spawnSync('uname', ['-r'], { encoding: 'utf8' }).stdout.trim()}, ${cpus().length} CPUs, Node ${process.version}`,
      '',
      '| started from Node (spawnSync) | wall, median | wall, p90 | CPU a run (user + system) |',
      '| --- | --- | --- | --- |',
      ...rows,
      '',
      `bubblewrap's own cost per attempt (minus setpriv's): wall ${bwrapOwn.toFixed(2)} ms without the network, ${bwrapNet.toFixed(2)} ms with it; ` +
        `CPU ${(cpu[NO_NET]! - cpu[SETPRIV_ONLY]!).toFixed(2)} ms and ${(cpu[NET]! - cpu[SETPRIV_ONLY]!).toFixed(2)} ms.`,
    ].join('\n'),
  );
} finally {
  rmSync(base, { recursive: true, force: true });
}
