/**
 * Issue 6's workload, Gantry and the queue libraries side by side in one run:
 * N chains A → B → C, every stage spawning `true`, all submitted first, then waited for.
 *
 * Gantry: one `gantry server` (SQLite, synchronous=FULL) and one `gantry agent` offering 30 slots
 * of 0.1 CPU, both the built CLI as child processes, exactly what a user runs. CPU per process is
 * read from /proc (utime + stime of the process itself; the `true` children are not counted; the
 * agent's launcher, the C, Python or bash program that starts stages for it, is counted as the agent). The
 * machine's CPU per stage (/proc/stat, every core, from the first submit to the last chain done)
 * counts everything a run caused, its stages' processes and the kernel's work included: the one
 * figure that compares systems whose work is split differently between processes. Nothing else
 * should run meanwhile.
 * Peers: bench/peers/*-chains.ts as child processes, same workload, 10 handlers per stage (a third of --slots).
 *
 * After its measured first round, Gantry runs the same N chains again on the same server and agent
 * (--warm rounds, default 1; 0: none) and reports the last as "warm": the first round of a fresh
 * process also pays for V8 compiling its hot code, which a long-running server pays once
 * (docs/throughput.md). The comparison with the peers is the first round's, whose processes are
 * fresh too.
 *
 * Also measured: ready → running latency (p50/p99) of a placeable stage on an idle cluster, and of
 * one while 100,000 stages wait in a pool no machine serves (the backlog must not slow others).
 *
 * Usage: npm run bench:throughput [-- --chains 1000,5000 --peers bullmq,graphile --probe-backlog 100000 --probe-settle 35 --probes 200 --probe-warmup 5 --warm 1 --out FILE (default bench/results/throughput.md, or throughput-postgres.md with --store postgres; '' only prints)]
 *        [--store sqlite|postgres] [--replicas N]: Gantry on the local PostgreSQL (a schema of the run's own, dropped after),
 *        with N replicas talking over the local NATS (the agent lists them all; submissions go round them).
 *        [--agent-replica I]: the agent lists replica I first (default 0, the first started, which leads).
 *        [--slots S]: the agent's slots (default 30; each peer gets S / 3 handlers a stage), to see whether a run is bound by a slot's cycle or by CPU.
 * Environment: GANTRY_BENCH_PROF=DIR (CPU profiles of server and agent), GANTRY_BENCH_PHASES=1
 * (where a slot's time goes), GANTRY_BENCH_ECHO=1 (their output, live), GANTRY_BENCH_PG_COUNT=DIR
 * (what the servers send PostgreSQL), GANTRY_BENCH_PG_STATEMENTS=1 (PostgreSQL's top statements for
 * each system's run, from pg_stat_statements: a cluster of the bench's own, bench/pg-private.sh),
 * GANTRY_BENCH_SERVER_FLAGS="--flag …" (Node's and V8's flags for the servers alone: `--trace-opt --trace-deopt`, say)
 * with GANTRY_BENCH_SERVER_OUT=FILE (all the servers print, kept there). Each round also prints the first server's CPU a
 * stage by thread: its main thread (user, system) and the rest (V8's compiler and collector, libuv's pool).
 * With --store postgres, the PostgreSQL cluster's own CPU is counted for Gantry's rounds (the
 * postmaster's process tree, bench/peers/postgres-cpu.ts), as the Graphile Worker peer counts it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, chmodSync, closeSync, fsyncSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import pg from 'pg';
import { dropPostgresSchema } from '../src/store/postgres/open-postgres-store.js';
import { NATS_URL, POSTGRES_URL } from '../test/support/services.js';
import { CLI, REPO } from '../test/support/gantry-process.js';
import { percentile, type ChainsResult } from './peers/chain-workload.js';
import { childrenOf, machineCpuMs, pidsOfCommand, processCpuMs, reapedChildrenCpuMs, threadsCpuMs } from './peers/proc-cpu.js';
import { JournalSpawns } from './journal-spawns.js';
import { trackPostgresCpu } from './peers/postgres-cpu.js';
import { printTopStatements, resetStatements, topStatements } from './pg-top-statements.js';
import { usageIfAsked } from './results-header.js';

const argv = process.argv.slice(2);
usageIfAsked(import.meta.url);
const arg = (name: string, def: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : def;
};
const CHAINS = arg('chains', '1000,5000').split(',').filter(Boolean).map(Number);
const PEERS = arg('peers', 'bullmq,graphile').split(',').filter(Boolean);
const PROBE_BACKLOG = Number(arg('probe-backlog', '100000'));
const PROBES = Number(arg('probes', '200'));
/**
 * Probes run first on each fresh probe cluster and left out of p50 / p99 (their worst is printed
 * beside them): the first stages of a fresh server and agent take their code's first, unoptimized
 * path (~100 ms for the very first here), a once-per-process cost that one sample in 200 would
 * otherwise turn into the p99.
 */
const PROBE_WARMUP = Number(arg('probe-warmup', '5'));
/**
 * Seconds the backlog waits, queued, before the probes: past the reconciler's `repairAfterMs`
 * (30 s), a queued job counts as unchanged and the repair pass looks at it every second, so the
 * probes see the steady state of a cluster whose backlog is old, not only a fresh one's (a repair
 * pass that read every waiting job's stages stalled the server 120 ms a second there).
 */
const PROBE_SETTLE_S = Number(arg('probe-settle', '35'));
// The bench's results file, rewritten by each run (bench/results/README.md); --out '' only prints.
const OUT = arg('out', join(REPO, arg('store', 'sqlite') === 'postgres' ? 'bench/results/throughput-postgres.md' : 'bench/results/throughput.md'));
/** Rounds of the same N chains run again on Gantry's same server and agent after the first, the last reported as "warm". */
const WARM_ROUNDS = Number(arg('warm', '1'));
/** Gantry's store: sqlite (the default), or postgres (the local PostgreSQL, a schema of the run's own). */
const STORE = arg('store', 'sqlite');
/** Control-plane replicas (postgres only; two or more talk over NATS, and the agent knows them all). */
const REPLICAS = Number(arg('replicas', '1'));
/** Which replica the agent lists first (its reports go there): 0, the first started, which leads; 1 the one that does not. */
const AGENT_REPLICA = Number(arg('agent-replica', '0'));
if (STORE !== 'sqlite' && STORE !== 'postgres') throw new Error(`--store ${STORE}: sqlite or postgres`);
if (!(REPLICAS >= 1) || (REPLICAS > 1 && STORE !== 'postgres')) throw new Error('--replicas above 1 needs --store postgres');
const GANTRY = STORE === 'sqlite' ? 'gantry' : `gantry (postgres${REPLICAS > 1 ? `, ${REPLICAS} replicas` : ''})`;
/** The agent's slots (0.1 CPU each); each peer gets a third of them as handlers per stage (GANTRY_BENCH_HANDLERS_PER_STAGE, set for them). */
const SLOTS = Number(arg('slots', '30'));
if (!Number.isInteger(SLOTS / 3) || SLOTS < 3) throw new Error(`--slots ${SLOTS}: a multiple of 3 (each peer gets a third a stage)`);
/** GANTRY_BENCH_PG_COUNT=DIR (postgres): count the servers' statements, transactions and conflicts, printed per stage. */
const PG_COUNT = STORE === 'postgres' ? (process.env.GANTRY_BENCH_PG_COUNT ?? '') : '';
/** GANTRY_BENCH_PG_STATEMENTS=1 (postgres): PostgreSQL's top statements by time, for each system's run. */
const PG_STATEMENTS = STORE === 'postgres' && process.env.GANTRY_BENCH_PG_STATEMENTS === '1';

const pct = percentile;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Started {
  proc: ChildProcess;
  out: () => string;
}

function start(args: string[], env: Record<string, string> = {}): Started {
  // GANTRY_BENCH_PROF=DIR: CPU profiles of the server and agents (written when they exit).
  const prof = process.env.GANTRY_BENCH_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.GANTRY_BENCH_PROF}`] : [];
  // GANTRY_BENCH_PG_COUNT=DIR: what each server sends PostgreSQL (bench/pg-count-preload.ts).
  const count = PG_COUNT && args[0] === 'server' ? ['--import', 'tsx', '--import', join(REPO, 'bench/pg-count-preload.ts')] : [];
  // GANTRY_BENCH_SERVER_FLAGS="--flag ...": flags for the servers' Node only (V8's among them: --trace-opt, --trace-deopt),
  // with GANTRY_BENCH_SERVER_OUT=FILE to keep all they print (the output kept here is cut to its last 200 KB).
  const serverFlags = args[0] === 'server' ? (process.env.GANTRY_BENCH_SERVER_FLAGS ?? '').split(' ').filter(Boolean) : [];
  const keep = args[0] === 'server' ? process.env.GANTRY_BENCH_SERVER_OUT : undefined;
  const proc = spawn(process.execPath, [...serverFlags, ...prof, ...count, CLI, ...args], {
    cwd: REPO,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  if (keep) for (const s of [proc.stdout, proc.stderr]) s.on('data', (d: Buffer) => appendFileSync(keep, d));
  proc.stdout.on('data', (d) => (out = (out + d).slice(-200_000)));
  proc.stderr.on('data', (d) => {
    out = (out + d).slice(-200_000);
    // GANTRY_BENCH_ECHO=1: show what the server and agents print, as it comes.
    if (process.env.GANTRY_BENCH_ECHO) process.stderr.write(d);
  });
  return { proc, out: () => out };
}

async function stopProc(s: Started): Promise<void> {
  if (s.proc.exitCode !== null || s.proc.signalCode !== null) return;
  const exited = new Promise((r) => s.proc.once('exit', r));
  s.proc.kill('SIGTERM');
  await Promise.race([exited, sleep(15_000)]);
  if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
}

async function waitFor<T>(what: string, fn: () => T | Promise<T>, ok: (v: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** The admin token of the cluster under test, which every request of the bench carries. */
let auth: Record<string, string> = {};

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...auth, ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`POST ${url}: ${res.status} ${text.slice(0, 500)}`);
  return JSON.parse(text);
}

/** The bench's own reads of the store (counts, times), on whichever database the cluster uses. `?` marks a parameter. */
interface BenchDb {
  all<T>(sql: string, ...args: unknown[]): Promise<T[]>;
  /** Rows as the driver gives them (text stays text). */
  raw<T>(sql: string, ...args: unknown[]): Promise<T[]>;
  count(sql: string, ...args: unknown[]): Promise<number>;
  close(): Promise<void>;
}

function sqliteDb(file: string): BenchDb {
  const db = new SQLite(file, { readonly: true });
  return {
    all: async <T>(q: string, ...args: unknown[]) => db.prepare(q).all(...args) as T[],
    raw: async <T>(q: string, ...args: unknown[]) => db.prepare(q).all(...args) as T[],
    count: async (q, ...args) => Number((db.prepare(q).get(...args) as { n: number }).n),
    close: async () => void db.close(),
  };
}

function postgresDb(url: string, schema: string): BenchDb {
  const pool = new pg.Pool({ connectionString: url, max: 2, options: `-c search_path=${schema}` });
  const text = (q: string) => {
    let i = 0;
    return q.replace(/\?/g, () => `$${++i}`);
  };
  // bigint columns arrive as strings: every numeric value the bench reads is a number (an id stays text).
  const numbers = <T>(rows: Record<string, unknown>[]) =>
    rows.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, typeof v === 'string' && /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v])) as T);
  return {
    all: async <T>(q: string, ...args: unknown[]) => numbers<T>((await pool.query(text(q), args)).rows),
    raw: async <T>(q: string, ...args: unknown[]) => (await pool.query(text(q), args)).rows as T[],
    count: async (q, ...args) => Number((await pool.query(text(q), args)).rows[0].n),
    close: async () => {
      await pool.end();
      await dropPostgresSchema(url, schema);
    },
  };
}

interface Cluster {
  url: string;
  /** Every replica's URL (one with SQLite); submissions go round them. */
  urls: string[];
  dataDir: string;
  servers: Started[];
  agents: Started[];
  db: BenchDb;
  stop(): Promise<void>;
}

async function startCluster(agents: { name: string; cpu: string; extra?: string[] }[]): Promise<Cluster> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-bench-'));
  // Passable, as `gantry up` makes its own: the agent's stages then run contained as users of their
  // own (docs/containment.md), what a root agent does; GANTRY_CONTAINMENT=off measures without.
  chmodSync(dataDir, 0o711);
  const schema = `bench_${process.pid}_${Date.now()}`;
  const storeEnv: Record<string, string> =
    STORE === 'postgres'
      ? {
          GANTRY_DATABASE_URL: POSTGRES_URL,
          GANTRY_DATABASE_SCHEMA: schema,
          GANTRY_ARTIFACTS_DIR: join(dataDir, 'artifacts'),
          ...(REPLICAS > 1 ? { GANTRY_BUS_URL: NATS_URL } : {}),
        }
      : {};
  const servers: Started[] = [];
  const urls: string[] = [];
  for (let i = 0; i < REPLICAS; i++) {
    // The first migrates; the others start once it has.
    const server = start(['server', '--data-dir', join(dataDir, `server-${i}`), '--port', '0', '--json'], { GANTRY_LOG_LEVEL: 'info', ...storeEnv });
    servers.push(server);
    urls.push(
      (await waitFor(
        'server',
        () => /"url":"([^"]+)"/.exec(server.out())?.[1],
        (u) => Boolean(u),
        20_000,
      ))!,
    );
  }
  const url = urls[0]!;
  // As a user would: the admin token the server wrote, and a join token for the agents.
  auth = { authorization: `Bearer ${readFileSync(join(dataDir, 'server-0', 'admin.token'), 'utf8').trim()}` };
  const joinToken = (await post(`${url}/v1/tokens`, { kind: 'join', name: 'bench agents' })).token as string;
  const ags = agents.map((a) =>
    start(
      [
        'agent',
        '--server',
        [...urls.slice(AGENT_REPLICA), ...urls.slice(0, AGENT_REPLICA)].join(','),
        '--name',
        a.name,
        '--cpu',
        a.cpu,
        '--memory',
        '64Gi',
        '--data-dir',
        join(dataDir, a.name),
        ...(a.extra ?? []),
      ],
      { GANTRY_JOIN_TOKEN: joinToken },
    ),
  );
  await waitFor(
    'agents',
    async () => (await (await fetch(`${url}/v1/machines`, { headers: auth })).json()) as { machines: unknown[] },
    (r) => r.machines.length === agents.length,
    20_000,
  );
  const db = STORE === 'postgres' ? postgresDb(POSTGRES_URL, schema) : sqliteDb(join(dataDir, 'server-0', 'gantry.db'));
  return {
    url,
    urls,
    dataDir,
    servers,
    agents: ags,
    db,
    async stop() {
      await Promise.all(ags.map(stopProc));
      await Promise.all(servers.map(stopProc));
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const stage = (name: string, needs: string[], extra: Record<string, unknown> = {}) => ({
  name,
  needs,
  resources: { cpu: '100m', memory: '16Mi' },
  command: ['true'],
  ...extra,
});
const chainSpec = (i: number) => ({ name: `chain-${i}`, stages: [stage('a', []), stage('b', ['a']), stage('c', ['b'])] });

/** Submits through the batch route, a thousand jobs a request. */
async function submitAll(urls: string | string[], specs: unknown[]): Promise<void> {
  const to = typeof urls === 'string' ? [urls] : urls;
  for (let i = 0; i < specs.length; i += 1000) await post(`${to[(i / 1000) % to.length]}/v1/jobs/batch`, { jobs: specs.slice(i, i + 1000) });
}

/** A peer's result line (chain-workload.ts), or Gantry's with its processes named. */
export type RunResult = Omit<ChainsResult, 'cpuMs'> & {
  cpuMs: Record<string, number>;
  cpuPerStageMs?: Record<string, number>;
  /** Gantry: the last of --warm rounds, the same work again on the same processes. */
  warm?: RunResult;
  skipped?: string;
  error?: string;
};

async function gantryChains(n: number): Promise<RunResult> {
  const c = await startCluster([{ name: 'bench-1', cpu: String(SLOTS / 10) }]);
  try {
    const first = await gantryRound(c, n, 0);
    // The same work again on the same processes: what a stage costs a server and an agent that
    // have been running a while. The first round also pays for V8 compiling the hot code (hundreds
    // of functions optimized as they get hot); a server that runs for days pays that once.
    const warm: RunResult[] = [];
    for (let i = 1; i <= WARM_ROUNDS; i++) warm.push(await gantryRound(c, n, i));
    return warm.length ? { ...first, warm: warm.at(-1)! } : first;
  } finally {
    await c.stop();
    if (PG_COUNT) printStatementCounts(c.servers, 3 * n * (1 + WARM_ROUNDS));
  }
}

/** What the servers sent PostgreSQL over the whole run (every round, start included), per stage. */
function printStatementCounts(servers: Started[], stages: number): void {
  for (const s of servers) {
    const file = join(PG_COUNT, `server-${s.proc.pid}.json`);
    let c: {
      total: number;
      statements?: number;
      conflicts: number;
      conflictsByText: [string, number][];
      waitMs: number;
      byKind: Record<string, number>;
      top: [string, number][];
    };
    try {
      c = JSON.parse(readFileSync(file, 'utf8'));
    } catch {
      console.error(`statement counts: none from server ${s.proc.pid} (${file})`);
      continue;
    }
    const per = (x: number) => (x / stages).toFixed(2);
    const txs = c.byKind.START ?? c.byKind.BEGIN ?? 0;
    const kinds = Object.entries(c.byKind)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${per(v)}`)
      .join(', ');
    console.error(
      `server ${s.proc.pid}, ${stages} stages: ${per(c.total)} round trips a stage (${kinds}), ${per(c.statements ?? c.total)} statements in them; ${per(txs)} transactions a stage; ` +
        `${c.conflicts} conflicts (${((100 * c.conflicts) / Math.max(1, txs)).toFixed(2)} % of transactions); ` +
        `waiting on PostgreSQL ${per(c.waitMs)} ms a stage`,
    );
    for (const [text, n] of c.top.slice(0, 15)) console.error(`  ${per(n).padStart(6)}  ${text}`);
    for (const [text, n] of c.conflictsByText) console.error(`  conflict ×${n}: ${text}`);
  }
}

/** A server's scheduler passes so far, by where they ran (`gantry_scheduler_pass_seconds`'s count by `where`: loop, transaction). */
async function schedulerPasses(url: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`, { headers: auth })).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^gantry_scheduler_pass_seconds_count\{where="([^"]+)"\} (\d+)/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

/** One round of `n` chains on a running cluster, measured on its own (its jobs are named `r<round>-chain-<i>`). */
async function gantryRound(c: Cluster, n: number, round: number): Promise<RunResult> {
  const serverPids = c.servers.map((x) => x.proc.pid!);
  const serversCpu = () => serverPids.reduce((ms, p) => ms + processCpuMs(p)!, 0);
  const pids = { agent: c.agents[0]!.proc.pid! };
  // The agent's launcher (the C, Python or bash program that starts the stages, src/agent/attempt/launcher.ts, its
  // only child that lasts) does the agent's work: its own CPU counts as the agent's (started with
  // the first attempt, so all of it is the first round's); the stage processes it starts do not,
  // as the `true` children do not. The machine's CPU counts everything.
  const launcherCpu = () => childrenOf(pids.agent).reduce((ms, p) => ms + (processCpuMs(p) ?? 0), 0);
  if (PG_STATEMENTS) await resetStatements(POSTGRES_URL);
  const pgCpu = STORE === 'postgres' ? await trackPostgresCpu(POSTGRES_URL) : null;
  const launcher0 = launcherCpu();
  const cpu0 = { server: serversCpu(), agent: processCpuMs(pids.agent)! + launcher0 };
  // With replicas, each server's CPU and NATS's own (docs/throughput.md, "Two replicas against one, again").
  const eachServer0 = serverPids.map((p) => processCpuMs(p)!);
  // The first server's split by thread (docs/throughput.md, "The server's CPU a stage on PostgreSQL, by thread").
  const threads0 = threadsCpuMs(serverPids[0]!);
  const natsCpu = () => pidsOfCommand('nats-server').reduce((ms, p) => ms + (processCpuMs(p) ?? 0), 0);
  const nats0 = REPLICAS > 1 ? natsCpu() : 0;
  const machine0 = machineCpuMs();
  const passes0 = await schedulerPasses(c.urls[0]!);
  const ended = () => c.db.count(`select count(*) as n from jobs where state in ('succeeded','failed','canceled')`);
  const before = await ended();
  // B's wait is timed to its process's start, read from the agent's journal (journal-spawns.ts).
  const spawns = new JournalSpawns(join(c.dataDir, 'bench-1'));
  const t0 = Date.now();
  await submitAll(
    c.urls,
    Array.from({ length: n }, (_, i) => ({ ...chainSpec(i), name: `r${round}-chain-${i}` })),
  );
  const submitMs = Date.now() - t0;
  let last = -1;
  let lastMove = Date.now();
  await waitFor(
    `${n} chains`,
    async () => (await ended()) - before,
    (done) => {
      if (done !== last) {
        last = done;
        lastMove = Date.now();
      }
      if (Date.now() - lastMove > 60_000)
        throw new Error(`no progress for 60 s at ${done}/${n}:\n${c.servers[0]!.out().slice(-3000)}\n${c.agents[0]!.out().slice(-3000)}`);
      return done >= n;
    },
    30 * 60_000,
  );
  const wallMs = Date.now() - t0;
  const machine1 = machineCpuMs();
  spawns.stop();
  const launcherMs = launcherCpu() - launcher0;
  const cpu: Record<string, number> = { server: serversCpu() - cpu0.server, agent: processCpuMs(pids.agent)! + launcherMs - cpu0.agent };
  // The agent's figure split: its Node process, and the launcher that starts its stages (docs/throughput.md, "The agent's CPU a stage").
  console.error(
    `agent CPU a stage (round ${round}): node ${((cpu.agent! - launcherMs) / (3 * n)).toFixed(3)} ms + launcher ${(launcherMs / (3 * n)).toFixed(3)} ms`,
  );
  const threads1 = threadsCpuMs(serverPids[0]!);
  if (threads0 && threads1) {
    const perStage = (ms: number) => (ms / (3 * n)).toFixed(3);
    console.error(
      `server CPU a stage (round ${round}${REPLICAS > 1 ? ', the first replica' : ''}): main thread ${perStage(threads1.mainUser - threads0.mainUser)} ms user + ${perStage(threads1.mainSystem - threads0.mainSystem)} ms system, its other threads (V8's compiler and collector, libuv) ${perStage(threads1.others - threads0.others)} ms`,
    );
  }
  // The first server's scheduler passes, by where they ran (docs/throughput.md, "The scheduler loop
  // woken only by hints no pass handled"): the loop's, and those before a commit.
  const passes1 = await schedulerPasses(c.urls[0]!);
  console.error(
    `scheduler passes (round ${round}${REPLICAS > 1 ? ', the first replica' : ''}): ${[...passes1].map(([where, k]) => `${where} ${k - (passes0.get(where) ?? 0)}`).join(', ')}`,
  );
  if (REPLICAS > 1) {
    const each = serverPids.map((p, i) => ((processCpuMs(p)! - eachServer0[i]!) / (3 * n)).toFixed(3));
    const roles = await Promise.all(
      c.urls.map(async (u) => (((await (await fetch(`${u}/healthz`)).json()) as { leader?: boolean }).leader ? 'leads' : 'follows')),
    );
    console.error(
      `servers' CPU a stage (round ${round}): ${each.map((ms, i) => `${ms} (${roles[i]})`).join(' + ')} ms; nats-server ${((natsCpu() - nats0) / (3 * n)).toFixed(3)} ms`,
    );
  }
  if (pgCpu) cpu.postgres = pgCpu.stop();
  const failed = await c.db.count(`select count(*) as n from jobs where state <> 'succeeded'`);
  if (failed) {
    let spawns: string;
    try {
      spawns = failedSpawns(c);
    } catch (err) {
      spawns = `(the stages' stderr could not be read: ${String(err)})`;
    }
    throw new Error(`${failed} chains did not succeed; the first of them:\n${await whyFailed(c.db)}\n${spawns}`);
  }
  const mine = `(select id from jobs where name like 'r${round}-chain-%')`;
  // From A's outcome recorded (the server's clock) to B's process started (the agent's, the same
  // machine's): an attempt started at placement has its started_at before its process starts.
  const pairs = await c.db.all<{ f: number; a: string; b: string }>(
    `select a.finished_at as f, a.id as a, b.id as b from attempts a join attempts b on a.job_id = b.job_id
       where a.stage_name = 'a' and b.stage_name = 'b' and a.state = 'succeeded' and b.state = 'succeeded' and a.job_id in ${mine}`,
  );
  const waits = pairs.flatMap((r) => {
    const at = spawns.at.get(r.b);
    return at === undefined ? [] : [at - Number(r.f)];
  });
  if (waits.length < pairs.length) console.error(`B after A: ${pairs.length - waits.length} of ${pairs.length} spawns not found in the agent's journal`);
  const stages = 3 * n;
  if (PG_STATEMENTS) printTopStatements(`${GANTRY}, round ${round}`, await topStatements(POSTGRES_URL), stages);
  // Where a slot's time goes, from the server's own timestamps (one clock): placed → acknowledged
  // (wake, assignment, the agent's report), acknowledged → outcome recorded (spawn, run, report).
  if (process.env.GANTRY_BENCH_PHASES) {
    printBAfterAPhases(round, pairs, spawns);
    const phases = await c.db.all<{ ack: number; run: number }>(
      `select started_at - scheduled_at as ack, finished_at - started_at as run from attempts where state = 'succeeded' and job_id in ${mine}`,
    );
    console.error(
      `phases (round ${round}): placed→acknowledged p50 ${pct(
        phases.map((p) => p.ack),
        50,
      )} ms p90 ${pct(
        phases.map((p) => p.ack),
        90,
      )}; acknowledged→outcome p50 ${pct(
        phases.map((p) => p.run),
        50,
      )} ms p90 ${pct(
        phases.map((p) => p.run),
        90,
      )}`,
    );
  }
  return {
    peer: GANTRY,
    chains: n,
    submitMs,
    wallMs,
    chainsPerSec: n / (wallMs / 1000),
    bWaitP50Ms: pct(waits, 50),
    bWaitP99Ms: pct(waits, 99),
    cpuMs: cpu,
    cpuPerStageMs: Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, v / stages])),
    machineCpuMs: machine0 === null || machine1 === null ? null : machine1 - machine0,
  };
}

/**
 * B after A cut into its phases, each from the clock that saw it (the agent's and the server's are
 * this machine's): A's exit seen by the agent → A's outcome written by the server (the exit made
 * durable, the report's wait for items and its trip, the server's queue and transaction) → B's
 * assignment received by the agent (the answer's trip back) → B's process started (its directory,
 * cgroup and the launcher's spawn); and A's answer handled (its `reported` record) beside them.
 */
function printBAfterAPhases(round: number, pairs: { f: number; a: string; b: string }[], j: JournalSpawns): void {
  const phase = (name: string, d: (p: { f: number; a: string; b: string }) => number | undefined) => {
    const xs = pairs.map(d).filter((x): x is number => x !== undefined && Number.isFinite(x));
    // An older agent's journal has no time for an assignment.
    if (xs.length === 0) return `${name}: not in this agent's journal`;
    return `${name} p50 ${pct(xs, 50)} p90 ${pct(xs, 90)} p99 ${pct(xs, 99)} ms (${xs.length})`;
  };
  const sub = (x: number | undefined, y: number | undefined) => (x === undefined || y === undefined ? undefined : x - y);
  console.error(
    `B after A, phases (round ${round}): ` +
      [
        phase('A exit seen → A written', (p) => sub(Number(p.f), j.exitAt.get(p.a))),
        phase('A written → B received', (p) => sub(j.assignedAt.get(p.b), Number(p.f))),
        phase('B received → B spawned', (p) => sub(j.at.get(p.b), j.assignedAt.get(p.b))),
        phase('A written → A answer handled', (p) => sub(j.reportedAt.get(p.a), Number(p.f))),
        phase('whole', (p) => sub(j.at.get(p.b), Number(p.f))),
        // B placed in A's report's transaction and started there, against B placed otherwise (by
        // the scheduler loop, or by another report), which waits for an answer or a heartbeat to
        // carry it, then for its acknowledgement's report.
        phase('whole, B started at placement', (p) => (j.startedAtPlacement.has(p.b) ? sub(j.at.get(p.b), Number(p.f)) : undefined)),
        phase('whole, B acknowledged', (p) => (j.startedAtPlacement.has(p.b) ? undefined : sub(j.at.get(p.b), Number(p.f)))),
      ].join('; '),
  );
}

/** What became of the first jobs that did not succeed: each stage's state, its attempts' ends, and its job's last events. */
async function whyFailed(db: BenchDb): Promise<string> {
  const jobs = await db.raw<{ id: string; name: string; state: string }>(
    `select id, name, state from jobs where state <> 'succeeded' order by created_at, id limit 3`,
  );
  const out: string[] = [];
  for (const j of jobs) {
    out.push(`job ${j.name} (${j.id}): ${j.state}`);
    for (const a of await db.raw<Record<string, unknown>>(
      `select stage_name, number, state, reason, end_kind, exit_code, signal, machine_id, scheduled_at, started_at, finished_at, released_at from attempts where job_id = ? order by scheduled_at`,
      j.id,
    ))
      out.push(`  attempt ${JSON.stringify(a)}`);
    for (const e of await db.raw<{ at: unknown; type: string; stage_name: string | null; message: string }>(
      `select at, type, stage_name, message from events where job_id = ? order by seq desc limit 12`,
      j.id,
    ))
      out.push(`  event ${String(e.at)} ${e.type} ${e.stage_name ?? ''}: ${e.message}`);
  }
  const byState = await db.raw<{ state: string; reason: string | null; n: unknown }>(
    `select state, reason, count(*) as n from attempts where state <> 'succeeded' group by state, reason order by 3 desc limit 10`,
  );
  out.push(`attempts not succeeded, by state and reason: ${byState.map((r) => `${r.state} (${r.reason ?? '-'}): ${String(r.n)}`).join('; ')}`);
  return out.join('\n');
}

/**
 * Ready → running for single stages submitted one at a time (each waits for the previous to
 * start), on an idle cluster, optionally with `backlog` stages waiting in a pool no machine serves.
 * Ready = the job's submission (its only stage is ready at once); running = the attempt's start as
 * the server recorded it (one clock).
 */
async function gantryProbe(backlog: number): Promise<{ backlog: number; p50: number; p99: number; max: number; n: number; setupMs: number; warmup: number[] }> {
  const c = await startCluster([{ name: 'probe-1', cpu: '4' }]);
  try {
    const t0 = Date.now();
    if (backlog > 0) {
      // 1,000 jobs of 100 stages each, asking for a GPU type no machine has.
      const per = 100;
      const specs = Array.from({ length: Math.ceil(backlog / per) }, (_, i) => ({
        name: `backlog-${i}`,
        stages: Array.from({ length: per }, (_, j) => ({
          name: `s${j}`,
          resources: { cpu: '100m', memory: '16Mi', gpu: { count: 1, type: 'nonexistent' } },
          command: ['true'],
        })),
      }));
      await submitAll(c.urls, specs);
      await waitFor(
        'backlog queued',
        () => c.db.count(`select count(*) as n from stages where state = 'ready'`),
        (n) => n >= backlog,
        600_000,
      );
    }
    const setupMs = Date.now() - t0;
    await sleep(backlog > 0 ? Math.max(1000, PROBE_SETTLE_S * 1000) : 1000);
    const lat: number[] = [];
    const started = async (jobId: string) =>
      (
        await c.db.all<{ s: number; p: number; c: number }>(
          `select a.started_at as s, a.scheduled_at as p, j.created_at as c from attempts a join jobs j on j.id = a.job_id where a.job_id = ? and a.started_at is not null`,
          jobId,
        )
      )[0];
    const placed: number[] = [];
    const warmup: number[] = [];
    for (let i = 0; i < PROBE_WARMUP + PROBES; i++) {
      const job = await post(`${c.urls[i % c.urls.length]}/v1/jobs`, { name: `probe-${i}`, stages: [stage('p', [])] });
      const row = await waitFor('probe start', () => started(job.id), Boolean, 30_000);
      if (i < PROBE_WARMUP) {
        warmup.push(row!.s - row!.c);
        continue;
      }
      lat.push(row!.s - row!.c);
      placed.push(row!.p - row!.c);
    }
    if (process.env.GANTRY_BENCH_PHASES) {
      const acked = lat.map((l, i) => l - placed[i]!);
      console.error(
        `probe phases (backlog ${backlog}): submitted→placed p50 ${pct(placed, 50)} p99 ${pct(placed, 99)} ms; placed→acknowledged p50 ${pct(acked, 50)} p99 ${pct(acked, 99)} ms`,
      );
      const worst = lat
        .map((l, i) => ({ l, p: placed[i]!, i }))
        .sort((a, b) => b.l - a.l)
        .slice(0, 5);
      console.error(`  the slowest: ${worst.map((w) => `#${w.i} ${w.l} ms (placed at ${w.p})`).join(', ')}`);
    }
    return { backlog, p50: pct(lat, 50), p99: pct(lat, 99), max: Math.max(...lat), n: lat.length, setupMs, warmup };
  } finally {
    await c.stop();
  }
}

async function peer(name: string, n: number): Promise<RunResult> {
  if (PG_STATEMENTS && name === 'graphile') await resetStatements(POSTGRES_URL);
  const proc = spawn(process.execPath, ['--import', 'tsx', join(REPO, `bench/peers/${name}-chains.ts`), '--chains', String(n)], {
    cwd: REPO,
    // The same PostgreSQL as Gantry's, unless told otherwise.
    env: { GANTRY_BENCH_PG_URL: POSTGRES_URL, ...process.env, GANTRY_BENCH_HANDLERS_PER_STAGE: String(SLOTS / 3) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  await new Promise((r) => proc.on('exit', r));
  const line = out.trim().split('\n').at(-1) ?? '';
  if (PG_STATEMENTS && name === 'graphile') printTopStatements(name, await topStatements(POSTGRES_URL), 3 * n);
  try {
    return JSON.parse(line) as RunResult;
  } catch {
    return { peer: name, chains: n, skipped: `no result: ${line.slice(0, 200)}` } as RunResult;
  }
}

/** fsync latency of small appends to a file in `dir`, in ms. */
function fsyncLatency(dir: string, n: number): { p50: number; p99: number; max: number } {
  const file = join(dir, `gantry-fsync-${process.pid}`);
  const fd = openSync(file, 'w');
  const times: number[] = [];
  try {
    const block = Buffer.alloc(4096, 1);
    for (let i = 0; i < n; i++) {
      writeSync(fd, block);
      const t = performance.now();
      fsyncSync(fd);
      times.push(performance.now() - t);
    }
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  return { p50: pct(times, 50), p99: pct(times, 99), max: Math.max(...times) };
}

/**
 * The CPU to start and reap one `/bin/true` from a small process (a shell loop, as an agent's
 * launcher starts stages), in ms: the shell's and its children's, which this process is charged
 * with once it reaps the shell (proc-cpu.ts). This shared machine's speed at starting processes
 * moved by 2.5× between hours, and every system here starts one a stage, so each run says what it was.
 */
async function spawnCost(n: number): Promise<number | null> {
  const t0 = reapedChildrenCpuMs(process.pid);
  await new Promise<void>((resolve, reject) =>
    spawn('/bin/sh', ['-c', `i=0; while [ $i -lt ${n} ]; do /bin/true; i=$((i+1)); done`], { stdio: 'ignore' })
      .once('error', reject)
      .once('exit', () => resolve()),
  );
  const t1 = reapedChildrenCpuMs(process.pid);
  return t0 === null || t1 === null ? null : (t1 - t0) / n;
}

const f = (x: number | undefined, d = 1) => (x === undefined || Number.isNaN(x) ? '-' : x.toFixed(d));

async function main() {
  const commit = await new Promise<string>((r) => {
    const p = spawn('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO });
    let s = '';
    p.stdout.on('data', (d) => (s += d));
    p.on('exit', () => r(s.trim()));
  });
  const lines: string[] = [];
  const say = (l: string) => {
    console.log(l);
    lines.push(l);
  };
  say(`# throughput, ${new Date().toISOString().slice(0, 10)}`);
  say('');
  say(
    `Machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, Node ${process.version}; commit ${commit}. Gantry: ${STORE === 'sqlite' ? 'one server (SQLite, synchronous=FULL)' : `${REPLICAS} server${REPLICAS > 1 ? 's' : ''} on the local PostgreSQL${REPLICAS > 1 ? ' and NATS' : ''}`}, one agent with ${SLOTS} slots of 0.1 CPU; peers: ${SLOTS / 3} handlers per stage.`,
  );
  say('');
  // Every acknowledged change waits for a flush (synchronous=FULL): the disk's flush latency bounds
  // the latency percentiles below, so it is measured here, in the same run.
  const flush = fsyncLatency(tmpdir(), 200);
  say(`Disk flush (fsync of 4 KiB in ${tmpdir()}, 200 times): p50 ${f(flush.p50, 2)} ms, p99 ${f(flush.p99, 1)} ms, max ${f(flush.max, 1)} ms.`);
  const spawnMs = await spawnCost(300).catch(() => null);
  if (spawnMs !== null) say(`Starting a process (\`/bin/true\` from a shell loop, 300 times): ${f(spawnMs, 2)} ms of CPU each.`);
  say('');
  say('| system | N chains | submit | wall | chains/s | B waits after A, p50 / p99 | CPU in all (s) | CPU per stage, ms | machine CPU per stage, ms |');
  say('| --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  const results: RunResult[] = [];
  for (const n of CHAINS) {
    const runs: RunResult[] = [await gantryChains(n)];
    for (const p of PEERS) runs.push(await peer(p, n));
    for (const r of runs) {
      results.push(r);
      if (r.skipped || r.error) {
        say(`| ${r.peer} | ${n} | ${r.skipped ? `skipped: ${r.skipped}` : `failed: ${r.error}`} |  |  |  |  |  |  |`);
        continue;
      }
      const cpuAll = Object.entries(r.cpuMs)
        .map(([k, v]) => `${k} ${f(v === null ? undefined : v / 1000, 2)}`)
        .join(' + ');
      const per = Object.entries(r.cpuMs)
        .map(([k, v]) => `${k} ${f(v === null ? undefined : v / (3 * n), 2)}`)
        .join(', ');
      const machine = r.machineCpuMs === null || r.machineCpuMs === undefined ? undefined : r.machineCpuMs / (3 * n);
      say(
        `| ${r.peer} | ${n} | ${f(r.submitMs / 1000, 2)} s | ${f(r.wallMs / 1000, 1)} s | **${f(r.chainsPerSec)}** | ${f(r.bWaitP50Ms)} / ${f(r.bWaitP99Ms)} ms | ${cpuAll} | ${per} | ${f(machine, 2)} |`,
      );
    }
  }
  for (const l of twiceThePeer(results, spawnMs)) say(l);
  const warm = results.filter((r) => r.warm);
  if (warm.length) {
    say('');
    say(
      `| ${GANTRY}, the same N chains again on the same server and agent (round ${WARM_ROUNDS + 1}) | N chains | wall | chains/s | B waits after A, p50 / p99 | CPU per stage, ms | machine CPU per stage, ms |`,
    );
    say('| --- | --- | --- | --- | --- | --- | --- |');
    for (const { warm: w } of warm) {
      const per = Object.entries(w!.cpuPerStageMs ?? {})
        .map(([k, v]) => `${k} ${f(v, 2)}`)
        .join(', ');
      const machine = w!.machineCpuMs === null || w!.machineCpuMs === undefined ? undefined : w!.machineCpuMs / (3 * w!.chains);
      say(
        `| warm | ${w!.chains} | ${f(w!.wallMs / 1000, 1)} s | **${f(w!.chainsPerSec)}** | ${f(w!.bWaitP50Ms)} / ${f(w!.bWaitP99Ms)} ms | ${per} | ${f(machine, 2)} |`,
      );
    }
  }
  if (PROBES > 0) {
    say('');
    say(`| ready → running, single stages one at a time | p50 | p99 | max | n | the fresh cluster's first ${PROBE_WARMUP} (not in p50 / p99), in order |`);
    say('| --- | --- | --- | --- | --- | --- |');
    for (const b of [0, PROBE_BACKLOG].filter((x, i, a) => a.indexOf(x) === i)) {
      const r = await gantryProbe(b);
      say(
        `| idle cluster${b ? `, ${b.toLocaleString('en')} stages waiting in a pool no machine serves (queued in ${f(r.setupMs / 1000)} s, probed from ${f(Math.max(1, PROBE_SETTLE_S))} s after)` : ''} | ${f(r.p50)} ms | ${f(r.p99)} ms | ${f(r.max)} ms | ${r.n} | ${r.warmup.length ? `${r.warmup.map((x) => f(x)).join(', ')} ms` : '(none)'} |`,
      );
    }
  }
  if (OUT) writeFileSync(OUT, lines.join('\n') + '\n');
  console.log(JSON.stringify(results));
}

await main();

/**
 * What issue 32's 2× would need on this machine, from this run's figures (docs/throughput.md,
 * "What 2× needs"): twice Graphile Worker's chains a second is a number of stages a second, which
 * the machine's cores can serve at most so much CPU a stage; a process per stage pays at least
 * starting it (the `true` start above) and PostgreSQL's CPU a stage, whatever schedules it.
 */
function twiceThePeer(results: readonly RunResult[], spawnMs: number | null): string[] {
  const out: string[] = [];
  const cores = cpus().length;
  for (const g of results.filter((r) => r.peer.startsWith('graphile') && !r.skipped && !r.error)) {
    const mine = results.find((r) => r.peer === GANTRY && r.chains === g.chains && !r.skipped && !r.error);
    if (!mine) continue;
    const stagesPerS = 2 * g.chainsPerSec * 3;
    const budget = (cores * 1000) / stagesPerS;
    const per = mine.cpuPerStageMs ?? {};
    const pg = per.postgres;
    const floor = spawnMs !== null && pg !== undefined ? spawnMs + pg : undefined;
    const machine = mine.machineCpuMs === null || mine.machineCpuMs === undefined ? undefined : mine.machineCpuMs / (3 * mine.chains);
    out.push(
      '',
      `2× ${g.peer} at N = ${g.chains}: ${f(2 * g.chainsPerSec)} chains/s, ${f(stagesPerS, 0)} stages/s; ${cores} cores give at most ${f(budget, 2)} ms of machine CPU a stage. ` +
        `Floor of a process a stage: start ${f(spawnMs ?? undefined, 2)} + PostgreSQL ${f(pg, 2)} = ${f(floor, 2)} ms, leaving ${f(floor === undefined ? undefined : budget - floor, 2)} ms ` +
        `for server and agent (now ${f(per.server, 2)} + ${f(per.agent, 2)}); the machine spent ${f(machine, 2)} ms a stage (${f(machine === undefined ? undefined : machine / budget, 2)}× the budget).`,
    );
  }
  return out;
}

/**
 * Why stages failed to start, before the cluster's data directory goes: a spawn the launcher
 * refused says only "its stderr says why" (launcher.c, launcher.py), and that stderr is a
 * file under the agent's directory. The first few stderr files that say anything, and the agent's
 * own log lines about containment or spawning.
 */
function failedSpawns(c: Cluster): string {
  const out: string[] = [];
  const walk = (dir: string, depth: number) => {
    if (out.length >= 5 || depth > 6) return;
    let entries: import('node:fs').Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const path = join(dir, e.name);
      if (e.isDirectory()) walk(path, depth + 1);
      else if (e.name.startsWith('stderr') && out.length < 5) {
        const text = readFileSync(path, 'utf8').trim();
        if (text) out.push(`  ${path.slice(c.dataDir.length + 1)}: ${text.slice(0, 300)}`);
      }
    }
  };
  walk(c.dataDir, 0);
  const agentLog = c.agents
    .flatMap((a) => a.out().split('\n'))
    .filter((l) => /cgroup|contain|spawn|launcher/i.test(l))
    .slice(-10);
  return [
    `stages' stderr that says something (${out.length}):`,
    ...out,
    `the agent's log on containment and spawns (last ${agentLog.length}):`,
    ...agentLog.map((l) => `  ${l.slice(0, 400)}`),
  ].join('\n');
}
