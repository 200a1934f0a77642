/**
 * The control plane's store work per stage, without HTTP, processes or a second core: the
 * throughput bench's workload (N chains A → B → C, one machine with 30 slots of 0.1 CPU) driven
 * through the store verbs the server runs for it, in one process. Each turn runs, concurrently as
 * requests would arrive (so group commit forms its groups): a scheduler pass, a heartbeat with the
 * attempts the agent holds, and a report acknowledging what was assigned and completing what was
 * acknowledged the turn before (a stage of `true` ends at once). CPU per stage is this process's
 * (process.cpuUsage) over the whole run, submit included; the SQLite file is real (WAL,
 * synchronous=FULL), in a temporary directory.
 *
 * It isolates what the store costs from what HTTP, JSON and the agent cost, with far less noise
 * than the throughput bench on a shared machine, for comparing store changes (pragmas, indexes,
 * statements). Usage: npm run bench:store [-- --chains 2000 --runs 3 --store sqlite|postgres --top 15]
 *
 * `--store postgres`: the same cycle on the local PostgreSQL (a schema of the run's own, dropped
 * after; GANTRY_TEST_DATABASE_URL), counting what the database is sent, which does not depend on
 * the machine's hour: statements and transactions per stage, by kind, the statements sent most,
 * and the transactions the database refused for a conflict (SQLSTATE 40001/40P01, run again by the
 * store). Issue 32's levers (fewer statements per report item, conflicts by construction) are
 * judged on these counts first, then on the throughput bench.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseJobSpec } from '../src/domain/job-spec.js';
import { schedulerPass } from '../src/server/scheduler-pass.js';
import { openSqliteStore } from '../src/store/sqlite/open-sqlite-store.js';
import type { Store } from '../src/store/store.js';
import { freshPostgresStore } from '../test/support/fresh-postgres-store.js';
import { countStatements, type StatementCounts } from '../test/support/statement-counter.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
};
const CHAINS = Number(arg('chains', '2000'));
const RUNS = Number(arg('runs', '3'));
const STORE = arg('store', 'sqlite');
const TOP = Number(arg('top', '15'));
if (STORE !== 'sqlite' && STORE !== 'postgres') throw new Error(`--store ${STORE}: sqlite or postgres`);
const LEASE_MS = 10_000;
/** What PostgreSQL was sent in a run (null on SQLite). */
const counter = STORE === 'postgres' ? countStatements() : null;

const stage = (name: string, needs: string[]) => ({ name, needs, resources: { cpu: '100m', memory: '16Mi' }, command: ['true'] });
const spec = (i: number) => parseJobSpec({ name: `chain-${i}`, stages: [stage('a', []), stage('b', ['a']), stage('c', ['b'])] });

/** The store the cycle runs on: a SQLite file in `dir`, or a PostgreSQL schema of its own, dropped at close. */
function open(dir: string): Promise<Store> {
  return STORE === 'sqlite' ? openSqliteStore(join(dir, 'gantry.db')) : freshPostgresStore('bench_store');
}

async function run(): Promise<{ cpuPerStageMs: number; wallMs: number; statements: StatementCounts | null }> {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-store-cycle-'));
  const store = await open(dir);
  const clock = { now: () => Date.now() };
  try {
    const m = await store.machineRegister({
      name: 'm1',
      cpuMillis: 3000,
      memoryBytes: 64 * 2 ** 30,
      gpus: [],
      gpusDeclared: false,
      region: null,
      labels: {},
      agent: { version: 'bench', host: 'bench', pid: process.pid },
      now: clock.now(),
    });
    const definitions = Array.from({ length: CHAINS }, (_, i) => spec(i));
    counter?.reset();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < definitions.length; i += 1000) await store.jobSubmitBatch({ definitions: definitions.slice(i, i + 1000), now: clock.now() });
    const held = new Map<string, number>(); // attempt → token, as the agent lists them
    let acked: { attemptId: string; token: number }[] = [];
    let done = 0;
    while (done < 3 * CHAINS) {
      const running = [...held].map(([attemptId, token]) => ({ attemptId, token }));
      const completed = acked.map((a) => ({ ...a, exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] }));
      const [, , assignments, report] = await Promise.all([
        schedulerPass(store, clock, { leaseMs: LEASE_MS }),
        store.machineHeartbeat({ machineId: m.id, running, now: clock.now(), leaseMs: LEASE_MS, missingAfterMs: 4000, jitter: 0.5, renewAfterMs: 1000 }),
        store.machineAssignments({ machineId: m.id, exclude: running.map((r) => r.attemptId) }),
        store.machineReport({ machineId: m.id, started: [], completed, now: clock.now(), leaseMs: LEASE_MS, jitter: () => 0.5 }),
      ]);
      for (const c of report.completed) if (c.result === 'ok') done++;
      for (const c of completed) held.delete(c.attemptId);
      const started = assignments.map((a) => ({ attemptId: a.attemptId, token: a.token, pid: null }));
      for (const a of assignments) held.set(a.attemptId, a.token);
      const acks = started.length
        ? await store.machineReport({ machineId: m.id, started, completed: [], now: clock.now(), leaseMs: LEASE_MS, jitter: () => 0.5 })
        : { started: [] };
      acked = started.filter((_, i) => acks.started[i]?.result === 'ok').map(({ attemptId, token }) => ({ attemptId, token }));
    }
    const cpu = process.cpuUsage(cpu0);
    return { cpuPerStageMs: (cpu.user + cpu.system) / 1000 / (3 * CHAINS), wallMs: performance.now() - t0, statements: counter?.snapshot() ?? null };
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await run(); // warm-up: the JIT, the page cache
const results = [];
for (let i = 0; i < RUNS; i++) results.push(await run());
const per = results.map((r) => r.cpuPerStageMs).sort((a, b) => a - b);
console.log(
  JSON.stringify({
    machine: `${cpus().length} × ${cpus()[0]?.model ?? '?'}`,
    chains: CHAINS,
    runs: RUNS,
    cpuPerStageMs: { median: Number(per[Math.floor(per.length / 2)]!.toFixed(3)), min: Number(per[0]!.toFixed(3)), max: Number(per.at(-1)!.toFixed(3)) },
    wallMs: results.map((r) => Math.round(r.wallMs)),
    ...(STORE === 'postgres' ? { store: 'postgres', perStage: perStage(results.at(-1)!.statements!) } : {}),
  }),
);

/** The last run's counts per stage (3 × chains stages), and the statements sent most. */
function perStage(c: StatementCounts) {
  const stages = 3 * CHAINS;
  const per = (n: number) => Number((n / stages).toFixed(2));
  return {
    statements: per(c.total),
    transactions: per(c.byKind.get('START') ?? 0),
    byKind: Object.fromEntries([...c.byKind].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, per(n)])),
    conflicts: c.conflicts,
    conflictsPerTransaction: Number((c.conflicts / Math.max(1, c.byKind.get('START') ?? 0)).toFixed(4)),
    top: [...c.byText]
      .sort((a, b) => b[1] - a[1])
      .slice(0, TOP)
      .map(([text, n]) => ({ perStage: per(n), text })),
  };
}
