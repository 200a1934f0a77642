/**
 * How long a fleet takes to register (issue 32; docs/throughput.md, "PostgreSQL × 2: registering a
 * fleet"): `--agents N` simulated agents (bench/fleet/) register against the built `gantry server`
 * on PostgreSQL with two replicas (or `--stores sqlite`: one server), `--at-once` registrations in
 * flight, each agent heartbeating from its registration on as a real one does (`--no-heartbeats`:
 * registrations alone). Every 5 s it prints how many have registered, the servers' cores and what
 * PostgreSQL's connections are doing; at the end, the time, the transactions PostgreSQL committed
 * and rolled back meanwhile (the whole database's: other users' too) and the StoreBusyError
 * entries in the servers' output. `--give-up-s` ends a run that has not finished (said so).
 *
 * Usage: node --import tsx bench/fleet-register.ts --agents 10000 [--stores postgres|sqlite]
 *   [--at-once 32] [--no-heartbeats] [--give-up-s 300] [--out bench/results/fleet-register.md]
 * GANTRY_BENCH_PROF=DIR profiles the servers (`--cpu-prof`, written when they exit).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { Fleet } from './fleet/fleet.js';
import { startFleetServers } from './fleet/fleet-servers.js';
import { processCpuMs } from './peers/proc-cpu.js';
import { arg, machineAndCommit, num, usageIfAsked } from './results-header.js';
import { REPO } from '../test/support/gantry-process.js';
import { POSTGRES_URL } from '../test/support/services.js';

usageIfAsked(import.meta.url);

const N = num('agents', 5000);
const STORE = arg('stores', 'postgres');
if (STORE !== 'postgres' && STORE !== 'sqlite') throw new Error(`--stores takes postgres or sqlite; got ${STORE}`);
const AT_ONCE = num('at-once', 32);
const HEARTBEATS = !process.argv.includes('--no-heartbeats');
const GIVE_UP_S = num('give-up-s', 300);
const OUT = arg('out', join(REPO, 'bench/results/fleet-register.md'));

/** GANTRY_BENCH_PROF=DIR profiles the servers (--cpu-prof, written when they exit), as bench/fleet.ts does. */
const PROF = process.env.GANTRY_BENCH_PROF;
const servers = await startFleetServers({
  store: STORE,
  replicas: STORE === 'postgres' ? 2 : 1,
  env: { GANTRY_RATE_LIMIT: '0' },
  nodeFlags: PROF ? ['--cpu-prof', `--cpu-prof-dir=${PROF}`] : [],
});
const db = STORE === 'postgres' ? new pg.Client({ connectionString: POSTGRES_URL }) : null;
await db?.connect();
const xacts = async () => {
  if (!db) return { commits: 0, rollbacks: 0 };
  const r = await db.query<{ c: number; r: number }>(
    'select xact_commit::int as c, xact_rollback::int as r from pg_stat_database where datname = current_database()',
  );
  return { commits: r.rows[0]!.c, rollbacks: r.rows[0]!.r };
};
const x0 = await xacts();
const fleet = new Fleet({
  servers: servers.urls,
  joinToken: servers.joinToken,
  count: N,
  prefix: 'sim',
  cpuMillis: 4000,
  memoryBytes: 16 * 2 ** 30,
  runMs: 500,
  registerConcurrency: AT_ONCE,
});
// Registrations alone: each agent's start (its heartbeats) left out.
if (!HEARTBEATS) for (const a of fleet.agents) a.start = () => {};

const t0 = performance.now();
const progress: string[] = [];
let cpu = servers.procs.map((p) => processCpuMs(p.pid!) ?? 0);
let before = 0;
const watch = setInterval(() => {
  void (async () => {
    const done = fleet.agents.filter((a) => a.machineId).length;
    const now = servers.procs.map((p) => processCpuMs(p.pid!) ?? 0);
    const cores = now.map((c, i) => ((c - cpu[i]!) / 5000).toFixed(2)).join(' + ');
    const conns = db
      ? (
          await db.query<{ state: string; w: string; n: number }>(
            "select state, coalesce(wait_event, '-') as w, count(*)::int as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and state <> 'idle' group by 1, 2 order by 3 desc limit 4",
          )
        ).rows
          .map((r) => `${r.n} ${r.state} (${r.w})`)
          .join(', ')
      : '';
    const line = `${((performance.now() - t0) / 1000).toFixed(0)} s: ${done} registered (+${done - before}), servers ${cores} cores, load ${readFileSync('/proc/loadavg', 'utf8').slice(0, 14)}${conns ? `; PostgreSQL: ${conns}` : ''}`;
    console.error(line);
    progress.push(line);
    cpu = now;
    before = done;
  })();
}, 5000);
// Unref'd: a run that finished early exits then, not when the give-up time comes (it held the heavy-run lock that long).
const finished = await Promise.race([fleet.start().then(() => true), new Promise<false>((r) => setTimeout(() => r(false), GIVE_UP_S * 1000).unref())]);
clearInterval(watch);
const seconds = (performance.now() - t0) / 1000;
const registered = fleet.agents.filter((a) => a.machineId).length;
const x1 = await xacts();
const busy = servers.procs.map((_p, i) => servers.output(i).match(/StoreBusyError/g)?.length ?? 0);
await db?.end();
await fleet.stop();
await servers.stop();

const result = finished
  ? `**${N.toLocaleString('en')} agents registered in ${seconds.toFixed(1)} s**`
  : `**not finished: ${registered.toLocaleString('en')} of ${N.toLocaleString('en')} registered after ${seconds.toFixed(0)} s**`;
const lines = [
  '# Registering a fleet (`bench/fleet-register.ts`)',
  '',
  machineAndCommit(REPO),
  `- **Run:** \`node --import tsx bench/fleet-register.ts ${process.argv.slice(2).join(' ')}\` on ${new Date().toISOString().slice(0, 16)}Z: ${STORE === 'postgres' ? 'PostgreSQL × 2 (half the fleet to each replica)' : 'SQLite'}, ${AT_ONCE} registrations in flight, ${HEARTBEATS ? 'each agent heartbeating from its registration on' : 'no heartbeats'}.`,
  '',
  `${result}; PostgreSQL committed ${(x1.commits - x0.commits).toLocaleString('en')} transactions and rolled back ${(x1.rollbacks - x0.rollbacks).toLocaleString('en')} meanwhile (the whole database: other users' too); StoreBusyError entries in the servers' output: ${busy.join(' + ')}.`,
  '',
  'Every 5 s:',
  '',
  ...progress.map((l) => `- ${l}`),
  '',
];
writeFileSync(OUT, lines.join('\n'));
console.log(readFileSync(OUT, 'utf8'));
