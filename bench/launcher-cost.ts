/**
 * What a launcher costs the machine to start one contained command (docs/throughput.md, "A compiled
 * launcher"): each launcher program (launcher-programs.ts: the C one and the Python one) started as
 * the agent starts it, sent N jobs of `/bin/true` one at a time, each contained as a root agent
 * contains a stage: joining a fresh cgroup in each of the v1 memory, cpu, cpuacct, pids, freezer and
 * devices hierarchies and the v2 one, as a uid of its own with no groups and no new privileges.
 * Rounds alternate the programs (C, Python, C, Python, …), so the machine's noise falls on both.
 *
 * Per round and program: the CPU a job of the launcher and its children (its /proc stat's utime +
 * stime + cutime + cstime: the children are reaped by it), from the first job after a warm-up to
 * the last job's end; the wall from the job's line written to its `pid` line back (p50, p99) and to
 * its `end` line (p50). Needs root and those hierarchies (the bench's own cgroups are removed after;
 * not named `gantry-…`, which a test run's teardown beside it would sweep: test/support/cgroup-leftovers.ts).
 *
 *     node --import tsx bench/launcher-cost.ts [--jobs 1000] [--rounds 2] [--out FILE]
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { arg, num, usageIfAsked } from './results-header.js';
import { launcherPrograms, type LauncherProgram } from '../src/agent/attempt/launcher-programs.js';
import { percentile } from './peers/chain-workload.js';

usageIfAsked(import.meta.url);
const JOBS = num('jobs', 1000);
const ROUNDS = num('rounds', 2);
const OUT = arg('out', '');
const WARM = 20;
const UID = 61184 + 901;
const V1 = ['memory', 'cpu', 'cpuacct', 'pids', 'freezer', 'devices'];
const TICK_MS = 10; // USER_HZ is 100 on Linux

const PATH = process.env.PATH ?? '/usr/bin:/bin';
const programs: LauncherProgram[] = (['c', 'python'] as const).map((name) => {
  const p = launcherPrograms({ PATH, GANTRY_AGENT_LAUNCHER: name })[0];
  if (!p) throw new Error(`no ${name} launcher here (the C one: npm run build, or run the launcher tests once)`);
  return p;
});
if (process.getuid?.() !== 0) throw new Error('needs root: cgroups and another uid');

interface Round {
  program: string;
  cpuMs: number;
  pidMs: number[];
  endMs: number[];
}

/** Ticks of the launcher and its reaped children, from /proc/<pid>/stat. */
function ticks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // After "pid (comm) ": state is field 0; utime, stime, cutime, cstime are fields 11–14.
  return Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
}

async function round(program: LauncherProgram, tag: string): Promise<Round> {
  const dirs = [...V1.map((h) => join('/sys/fs/cgroup', h, `launcher-cost-bench-${tag}`)), join('/sys/fs/cgroup/unified', `launcher-cost-bench-${tag}`)];
  const work = mkdtempSync(join(tmpdir(), 'gantry-launcher-cost-'));
  const proc = spawn(program.argv[0]!, program.argv.slice(1), { stdio: ['pipe', 'pipe', 'inherit'], env: { PATH } });
  let buf = '';
  const waiting = new Map<string, (line: string) => void>();
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (d: string) => {
    buf += d;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      last = line;
      const [kind, id] = line.split(' ');
      waiting.get(kind === 'ready' ? 'ready' : kind === 'end' ? `end ${id}` : `start ${id}`)?.(line);
    }
  });
  let last = '';
  // A line that never comes is the launcher's fault to report, not a bench that waits forever.
  const next = (key: string) =>
    new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`${program.name}: no "${key}" line in 10 s; the last line was "${last}"`)), 10_000);
      waiting.set(key, (line) => {
        clearTimeout(t);
        resolve(line);
      });
    });
  if (program.preamble) proc.stdin.write(program.preamble);
  await next('ready');
  const r: Round = { program: program.name, cpuMs: 0, pidMs: [], endMs: [] };
  let t0 = 0;
  try {
    for (let i = 0; i < WARM + JOBS; i++) {
      if (i === WARM) t0 = ticks(proc.pid!);
      const id = String(i);
      const made = dirs.map((d) => `${d}-${i}`);
      for (const d of made) mkdirSync(d);
      const line = program.encode({
        id,
        argv: ['/bin/true'],
        cwd: work,
        set: { GANTRY_ATTEMPT_ID: `att_${i}` },
        stdoutFile: join(work, 'out'),
        stderrFile: join(work, 'err'),
        statusFile: join(work, `status`),
        contain: { procsFiles: made.map((d) => join(d, 'cgroup.procs')), user: { uid: UID, gid: UID }, wrap: [] },
      })!;
      const started = next(`start ${id}`);
      const end = next(`end ${id}`);
      const s = performance.now();
      proc.stdin.write(line);
      const first = await started;
      if (!first.startsWith('pid')) throw new Error(`${program.name}: ${first}: ${readFileSync(join(work, 'err'), 'utf8')}`);
      const p = performance.now();
      const e = await end;
      const done = performance.now();
      if (e !== `end ${id} 0`) throw new Error(`${program.name}: ${e}`);
      for (const d of made) rmdirSync(d);
      if (i >= WARM) {
        r.pidMs.push(p - s);
        r.endMs.push(done - s);
      }
    }
    r.cpuMs = ((ticks(proc.pid!) - t0) * TICK_MS) / JOBS;
  } finally {
    proc.stdin.end();
    rmSync(work, { recursive: true, force: true });
  }
  return r;
}

const rounds: Round[] = [];
for (let k = 0; k < ROUNDS; k++) {
  for (const p of programs) {
    const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
    const r = await round(p, `${process.pid}-${k}-${p.name}`);
    rounds.push(r);
    const f = (x: number) => x.toFixed(2);
    console.log(
      `round ${k + 1} ${p.name}: ${f(r.cpuMs)} ms CPU a job (launcher + children); pid back p50 ${f(percentile(r.pidMs, 50))} ms, p99 ${f(percentile(r.pidMs, 99))}; end p50 ${f(percentile(r.endMs, 50))} ms; load before ${load}`,
    );
  }
}

const f = (x: number) => x.toFixed(2);
const table = [
  `Machine: ${cpus().length} × ${cpus()[0]?.model.trim()}, Node ${process.version}. ${JOBS} contained \`/bin/true\`s a round (after ${WARM} warm-up), one at a time, each in fresh cgroups (v1 ${V1.join(', ')}; v2) as uid ${UID}.`,
  '',
  '| round | launcher | CPU a job (launcher + children) | pid line back p50 | p99 | end line p50 |',
  '| --- | --- | --- | --- | --- | --- |',
  ...rounds.map(
    (r, i) =>
      `| ${Math.floor(i / programs.length) + 1} | ${r.program} | ${f(r.cpuMs)} ms | ${f(percentile(r.pidMs, 50))} ms | ${f(percentile(r.pidMs, 99))} ms | ${f(percentile(r.endMs, 50))} ms |`,
  ),
].join('\n');
console.log(`\n${table}`);
if (OUT) writeFileSync(OUT, table + '\n');
