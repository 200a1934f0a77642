/**
 * The control plane's CPU per stage on its own: the throughput bench's workload (N chains A → B → C,
 * one machine with 30 slots of 0.1 CPU) against a real `gantry server` (the built CLI, SQLite,
 * synchronous=FULL), driven by a stand-in agent in this process that speaks the agent protocol
 * over HTTP as the real one does (a held heartbeat long-poll; one batched report in flight,
 * acknowledgements and outcomes together, assignments on the answers to outcomes, started at placement where the server offers that)
 * but starts no process: a stage "ends" `--stage-ms` (5) after its acknowledgement is answered, or after the answer that started it,
 * about what a spawn of `true` and its exit take. So the server sees the real requests, in about the real batches,
 * without an agent, a launcher and thousands of processes competing with it for the same cores;
 * the throughput bench measures it under that competition.
 *
 * Usage: npm run bench:server [-- --chains 2000 --runs 3 --stage-ms 5]; GANTRY_BENCH_PROF=DIR profiles the server. Prints one JSON line: the server's CPU
 * per stage (from /proc) for each run, their median, and the requests it took.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, REPO } from '../test/support/gantry-process.js';
import { processCpuMs } from './peers/proc-cpu.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
};
const CHAINS = Number(arg('chains', '2000'));
const RUNS = Number(arg('runs', '3'));
const SLOTS = 30;
/** How long a stage "runs" after its acknowledgement (a spawn, `true`, its exit, as the agent sees them). */
const STAGE_MS = Number(arg('stage-ms', '5'));
/** Rounds of N chains on the same server, each measured apart: the first pays for the JIT's warm-up, the later ones show the steady cost. */
const ROUNDS = Number(arg('rounds', '1'));

async function call<T>(url: string, body: unknown, token: string): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`POST ${url}: ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text) as T;
}

interface Assignment {
  attemptId: string;
  token: number;
  /** Written running where it was placed (docs/agent.md, "Started at placement"): nothing to acknowledge. */
  started?: boolean;
}

interface Round {
  cpuPerStageMs: number;
  wallMs: number;
  heartbeats: number;
  reports: number;
}

async function run(): Promise<Round[]> {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-server-cost-'));
  // GANTRY_BENCH_PROF=DIR: a CPU profile of the server, written when it exits.
  const prof = process.env.GANTRY_BENCH_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.GANTRY_BENCH_PROF}`] : [];
  // GANTRY_BENCH_NODE_FLAGS="--flag ...": flags for the server's Node (V8's among them), for experiments.
  const flags = (process.env.GANTRY_BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  const server = spawn(process.execPath, [...prof, ...flags, CLI, 'server', '--data-dir', dir, '--port', '0', '--json'], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  server.stdout.on('data', (d) => (out += d));
  server.stderr.on('data', (d) => (out += d));
  try {
    let url: string | undefined;
    for (let i = 0; i < 400 && !url; i++) {
      url = /"url":"([^"]+)"/.exec(out)?.[1];
      if (!url) await new Promise((r) => setTimeout(r, 50));
    }
    if (!url) throw new Error(`server did not start:\n${out}`);
    const admin = readFileSync(join(dir, 'admin.token'), 'utf8').trim();
    const joinToken = (await call<{ token: string }>(`${url}/v1/tokens`, { kind: 'join', name: 'bench' }, admin)).token;
    const reg = await call<{ machineId: string; credential: string; settings: { reportAssignments?: boolean; startedAssignments?: boolean } }>(
      `${url}/v1/agent/register`,
      {
        name: 'bench-1',
        cpuMillis: SLOTS * 100,
        memoryBytes: 64 * 2 ** 30,
        gpus: [],
        gpusDeclared: false,
        region: null,
        labels: {},
        agent: { version: 'bench', host: 'bench', pid: process.pid },
      },
      joinToken,
    );
    const machine = reg.credential;
    const base = `${url}/v1/agent/machines/${reg.machineId}`;
    const stage = (name: string, needs: string[]) => ({ name, needs, resources: { cpu: '100m', memory: '16Mi' }, command: ['true'] });
    const specs = Array.from({ length: CHAINS }, (_, i) => ({ name: `chain-${i}`, stages: [stage('a', []), stage('b', ['a']), stage('c', ['b'])] }));
    const round = async (): Promise<Round> => {
      const cpu0 = processCpuMs(server.pid!)!;
      const t0 = performance.now();
      for (let i = 0; i < specs.length; i += 1000) await call(`${url}/v1/jobs/batch`, { jobs: specs.slice(i, i + 1000) }, admin);

      const held = new Map<string, number>();
      const toAck: Assignment[] = [];
      const toComplete: Assignment[] = [];
      let done = 0;
      let heartbeats = 0;
      let reports = 0;
      let wakeReporter: (() => void) | null = null;
      /** Assignments from either answer, a heartbeat's or a report's, each taken once, as the agent does. */
      const take = (assignments: Assignment[]) => {
        for (const a of assignments) {
          if (held.has(a.attemptId)) continue;
          held.set(a.attemptId, a.token);
          if (a.started) ended(a);
          else toAck.push(a);
        }
      };
      /** A stage of `true` is over STAGE_MS after it may run: its outcome goes with the report then. */
      const ended = (a: Assignment) =>
        setTimeout(() => {
          toComplete.push(a);
          wakeReporter?.();
        }, STAGE_MS);
      const finished = new Promise<void>((resolve, reject) => {
        // The reporter: one request in flight; what comes meanwhile goes into the next one.
        const reporter = async () => {
          while (done < 3 * CHAINS) {
            if (toAck.length === 0 && toComplete.length === 0) await new Promise<void>((r) => (wakeReporter = r));
            wakeReporter = null;
            const started = toAck.splice(0).map((a) => ({ attemptId: a.attemptId, token: a.token, pid: null }));
            const completed = toComplete
              .splice(0)
              .map((a) => ({ attemptId: a.attemptId, token: a.token, exitCode: 0, signal: null, reason: null, outputs: [] }));
            reports++;
            // As the agent does: outcomes ask for the assignments they make room for, where the server
            // offers it, started at placement where it offers that (GANTRY_BENCH_ACK_ALL=1: never, as older agents).
            const ask = completed.length > 0 && reg.settings.reportAssignments === true;
            const start = ask && reg.settings.startedAssignments === true && !process.env.GANTRY_BENCH_ACK_ALL;
            const r = await call<{
              started: { attemptId: string; result: string }[];
              completed: { attemptId: string; result: string }[];
              assignments?: Assignment[];
            }>(
              `${base}/report`,
              ask ? { started, completed, assignments: true, ...(start ? { startAssignments: true } : {}) } : { started, completed },
              machine,
            );
            take(r.assignments ?? []);
            for (const c of r.completed) {
              held.delete(c.attemptId);
              if (c.result === 'ok') done++;
            }
            for (const s of r.started) if (s.result === 'ok') ended({ attemptId: s.attemptId, token: held.get(s.attemptId)! });
          }
          resolve();
        };
        // The heartbeat: a long poll, sent again as soon as it is answered.
        const heartbeat = async () => {
          while (done < 3 * CHAINS) {
            heartbeats++;
            const running = [...held].map(([attemptId, token]) => ({ attemptId, token }));
            const r = await call<{ assignments: Assignment[] }>(`${base}/heartbeat`, { running, waitMs: 1000 }, machine);
            take(r.assignments);
            if (r.assignments.length) wakeReporter?.();
          }
        };
        reporter().catch(reject);
        heartbeat().catch(reject);
      });
      await finished;
      const wallMs = performance.now() - t0;
      const cpuMs = processCpuMs(server.pid!)! - cpu0;
      return { cpuPerStageMs: cpuMs / (3 * CHAINS), wallMs, heartbeats, reports };
    };
    const rounds: Round[] = [];
    for (let i = 0; i < ROUNDS; i++) rounds.push(await round());
    return rounds;
  } finally {
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
    // GANTRY_BENCH_SERVER_OUT=FILE: what the server wrote (with GANTRY_BENCH_NODE_FLAGS=--trace-deopt, say).
    if (process.env.GANTRY_BENCH_SERVER_OUT) writeFileSync(process.env.GANTRY_BENCH_SERVER_OUT, out);
  }
}

const byRun: Round[][] = [];
for (let i = 0; i < RUNS; i++) byRun.push(await run());
// The median and the list are of each run's last round: the first round when --rounds is 1.
const results = byRun.map((rounds) => rounds[rounds.length - 1]!);
const per = results.map((r) => r.cpuPerStageMs).sort((a, b) => a - b);
console.log(
  JSON.stringify({
    machine: `${cpus().length} × ${cpus()[0]?.model ?? '?'}`,
    chains: CHAINS,
    serverCpuPerStageMs: { median: Number(per[Math.floor(per.length / 2)]!.toFixed(3)), runs: results.map((r) => Number(r.cpuPerStageMs.toFixed(3))) },
    stagesPerSecond: results.map((r) => Math.round((3 * CHAINS) / (r.wallMs / 1000))),
    requestsPerStage: results.map((r) => Number(((r.heartbeats + r.reports) / (3 * CHAINS)).toFixed(2))),
    ...(ROUNDS > 1 ? { roundsCpuPerStageMs: byRun.map((rounds) => rounds.map((r) => Number(r.cpuPerStageMs.toFixed(3)))) } : {}),
  }),
);
