/**
 * The Graphile Worker peer for bench/throughput.ts: the chain workload of ./chain-workload.ts on
 * the local PostgreSQL (GANTRY_BENCH_PG_URL, default postgres://localhost:5432/test).
 * Usage: node --import tsx bench/peers/graphile-chains.ts --chains N
 *
 * Graphile Worker has no DAG, so the chain is what its users write: task `a` spawns its process,
 * then adds job `b` with helpers.addJob (its own transaction, committed before `a` is marked done),
 * `b` adds `c`. One runner at concurrency 30 serves all three tasks (Graphile has no per-task
 * concurrency; 30 = Gantry's agent's slots), with a pool of 30 connections, as Graphile asks for
 * when concurrency exceeds its default pool of 10, and LISTEN/NOTIFY (its default) so a worker
 * learns of a new job at once instead of at the next poll. All tasks share one job table ordered
 * by (priority, run_at, id), so a B waits behind every A enqueued before it: the B wait is
 * the A backlog's drain time, not a notification delay.
 *
 * Server CPU is the PostgreSQL cluster's (its postmaster and every process under it, postgres-cpu.ts)
 * from just before the first enqueue to the last completion. Each run installs Graphile in its own schema,
 * gantry_bench_<pid>, dropped at the end. No PostgreSQL: a `skipped` line and exit 0.
 */
import { createRequire } from 'node:module';
import { userInfo } from 'node:os';
import { Logger, makeWorkerUtils, run, type Runner, type TaskList, type WorkerUtils } from 'graphile-worker';
import { BWaits, chainsArg, consoleToStderr, exitIfStuck, Finish, HANDLERS_PER_STAGE, report, runStage, submitAll, timeoutMs } from './chain-workload.js';
import { machineCpuMs } from './proc-cpu.js';
import { trackPostgresCpu } from './postgres-cpu.js';

consoleToStderr();
const PEER = `graphile-worker ${(createRequire(import.meta.url)('graphile-worker/package.json') as { version: string }).version}`;
const PG_URL = withUser(process.env.GANTRY_BENCH_PG_URL ?? 'postgres://localhost:5432/test');
const SCHEMA = `gantry_bench_${process.pid}`;
const CONCURRENCY = 3 * HANDLERS_PER_STAGE;

// Warnings and errors to stderr; info (a line per job) only with GANTRY_BENCH_VERBOSE=1.
const verbose = process.env.GANTRY_BENCH_VERBOSE === '1';
const logger = new Logger((scope) => (level, message) => {
  // LogLevel's values are these strings; the enum itself is not importable from ESM (a CJS re-export).
  const l: string = level;
  if (l === 'debug' || (l === 'info' && !verbose)) return;
  process.stderr.write(`[graphile-worker${scope.label ? ` ${scope.label}` : ''}] ${level}: ${message}\n`);
});

/**
 * node-postgres takes a missing user from $USER, which is unset in some shells (CI, containers);
 * psql takes the OS user. Do as psql does, so the default URL works wherever psql works.
 */
function withUser(url: string): string {
  try {
    const u = new URL(url);
    if (!u.username && !process.env.PGUSER) u.username = userInfo().username;
    return u.toString();
  } catch {
    return url; // not a URL (e.g. a libpq keyword string): leave it to node-postgres
  }
}

/** The URL without its password, for messages. */
function where(url: string): string {
  try {
    const u = new URL(url);
    u.password = '';
    return u.toString();
  } catch {
    return '(unparsable GANTRY_BENCH_PG_URL)';
  }
}

async function main(n: number): Promise<void> {
  let utils: WorkerUtils;
  try {
    utils = await makeWorkerUtils({ connectionString: PG_URL, schema: SCHEMA, logger });
    await utils.withPgClient((c) => c.query('select 1'));
  } catch (err) {
    return report({ peer: PEER, chains: n, skipped: `no PostgreSQL at ${where(PG_URL)}: ${(err as Error).message}` });
  }
  const dropSchema = () => utils.withPgClient((c) => c.query(`drop schema if exists "${SCHEMA}" cascade`));

  const waits = new BWaits(n);
  const done = new Finish(n, timeoutMs()); // bounds the setup too
  let runner: Runner | null = null;
  try {
    await dropSchema(); // a crashed run with the same pid may have left it
    await utils.migrate();
    const chainOf = (payload: unknown) => (payload as { chain: number }).chain;
    const taskList: TaskList = {
      a: async (payload, helpers) => {
        await runStage();
        waits.aEnd(chainOf(payload));
        await helpers.addJob('b', { chain: chainOf(payload) });
      },
      b: async (payload, helpers) => {
        waits.bStart(chainOf(payload));
        await runStage();
        await helpers.addJob('c', { chain: chainOf(payload) });
      },
      c: async () => {
        await runStage();
      },
    };
    runner = await run({
      connectionString: PG_URL,
      schema: SCHEMA,
      concurrency: CONCURRENCY,
      maxPoolSize: CONCURRENCY,
      noHandleSignals: true,
      taskList,
      logger,
    });
    // job:complete fires once the outcome is written back to the database.
    runner.events.on('job:complete', ({ job, error }) => {
      if (error) done.fail(new Error(`job ${job.id} (${job.task_identifier}) failed: ${(error as Error).message ?? error}`));
      else if (job.task_identifier === 'c') done.count();
    });

    const server = await trackPostgresCpu(PG_URL);
    const cpu0 = process.cpuUsage();
    const machine0 = machineCpuMs();
    const t0 = performance.now();
    const r = runner;
    await Promise.race([submitAll(n, (chain) => r.addJob('a', { chain })), done.promise]);
    const submitMs = performance.now() - t0;
    await done.promise;
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const machine1 = machineCpuMs();
    const serverMs = server.stop();
    const { p50, p99 } = waits.percentiles();
    report({
      peer: PEER,
      chains: n,
      submitMs,
      wallMs,
      chainsPerSec: n / (wallMs / 1000),
      bWaitP50Ms: p50,
      bWaitP99Ms: p99,
      cpuMs: { client: (cpu.user + cpu.system) / 1000, server: serverMs },
      machineCpuMs: machine0 === null || machine1 === null ? null : machine1 - machine0,
    });
  } finally {
    done.stop();
    // Cleanup failures go to stderr: the result line is already out, or an error is on its way.
    const warn = (what: string) => (err: Error) => console.error(`${what}: ${err.message}`);
    await runner?.stop().catch(warn('stop runner'));
    await dropSchema().catch(warn(`drop schema ${SCHEMA}`));
    await Promise.resolve()
      .then(() => utils.release())
      .catch(warn('release worker utils'));
  }
}

let chains = 0;
try {
  chains = chainsArg();
  await main(chains);
} catch (err) {
  report({ peer: PEER, chains, error: (err as Error).message });
}
exitIfStuck();
