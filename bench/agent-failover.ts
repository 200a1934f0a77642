/**
 * Agent failover: SIGKILL the agent running a stage (and the stage's process group, since a dead
 * machine's processes die with it), then measure until a new attempt of that stage is running on
 * the other machine. Built dist/, `gantry server` plus two `gantry agent` processes (m1, m2:
 * 2 CPU, 2 Gi each), DEFAULT timing settings (every GANTRY_* variable is removed from the
 * children's environment).
 *
 * t0 = the kill (this process's clock); t1 = the new attempt's `startedAt` (the server's clock:
 * same host, same clock). Also recorded: when this poll (every 20 ms) saw it running, when the
 * server declared the old attempt lost, and how long the machine had been silent when it died
 * (t0 − its final lastHeartbeatAt; negative when the server wrote a heartbeat after the kill).
 *
 * Prediction (docs/failure-detection.md): [lostAfter − heartbeat, lostAfter + 1.2 × lostMachinesInterval]
 * plus a few ms of scheduling and start = [8000, 11200] ms at the defaults.
 * Usage: npm run bench:failover [-- --trials 20 --kill-delay-max-ms 2000]
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { defaultServerConfig } from '../src/server/server-config.js';
import { api, CLI, jobOf, processGroupAlive, REPO, submit, until, useServerToken } from '../test/support/gantry-process.js';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  const v = i > 0 ? Number(process.argv[i + 1]) : def;
  if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer`);
  return v;
};
const cfg = defaultServerConfig();
const TRIALS = arg('trials', 20);
/**
 * A random wait in [0, this) between seeing the attempt running and the kill, so that deaths fall
 * at random points of the agent's heartbeat cycle; 0 kills at once (then every death lands just
 * after the heartbeat the agent sends right after starting the stage).
 */
const KILL_DELAY_MAX_MS = (() => {
  const i = process.argv.indexOf('--kill-delay-max-ms');
  const v = i > 0 ? Number(process.argv[i + 1]) : cfg.heartbeatMs;
  if (!Number.isFinite(v) || v < 0) throw new Error('--kill-delay-max-ms must be a number >= 0');
  return v;
})();
const POLL_MS = 20;

const PREDICTED = { minMs: cfg.lostAfterMs - cfg.heartbeatMs, maxMs: cfg.lostAfterMs + 1.2 * cfg.lostMachinesIntervalMs };

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const median = (xs: number[]) => {
  const s = sorted(xs);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const pct = (xs: number[], p: number) => sorted(xs)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The children get no GANTRY_* settings from our environment: defaults only. */
const childEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('GANTRY_')));

const freePort = () =>
  new Promise<number>((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });

const children = new Set<ChildProcess>();
const stagePgids = new Set<number>();

function launch(args: string[], logFile: string, env: Record<string, string> = {}): ChildProcess {
  const proc = spawn(process.execPath, [CLI, ...args], { cwd: REPO, env: { ...childEnv, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const log = createWriteStream(logFile, { flags: 'a' });
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  return proc;
}

async function stopProc(proc: ChildProcess, graceMs = 10_000) {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  await Promise.race([exited, sleep(graceMs)]);
  if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
}

async function cleanup() {
  await Promise.all([...children].map((p) => stopProc(p)));
  for (const pgid of stagePgids) {
    if (processGroupAlive(pgid)) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
}

interface Machine {
  id: string;
  name: string;
  health: string;
  lastHeartbeatAt: number;
  allocated: { cpuMillis: number };
}
interface Attempt {
  id: string;
  number: number;
  state: string;
  machine: string | null;
  pid: number | null;
  startedAt: number | null;
  finishedAt: number | null;
  reason: string | null;
}
const machines = (url: string) => api<{ machines: Machine[] }>(url, '/v1/machines').then((r) => r.body.machines);
const attemptsOf = (job: any) => job.stages[0].attempts as Attempt[];

/** Which code ran: HEAD, whether src/ differs from it, when dist/ was built (read-only git). */
function buildInfo() {
  const git = (...a: string[]) => {
    try {
      return execFileSync('git', a, { cwd: REPO, encoding: 'utf8' }).trim();
    } catch {
      return null;
    }
  };
  return {
    commit: git('rev-parse', '--short', 'HEAD'),
    srcDirty: (git('status', '--porcelain', '--', 'src') ?? '') !== '',
    distBuiltAt: statSync(CLI).mtimeMs,
  };
}

async function main() {
  const build = buildInfo();
  const dataDir = mkdtempSync(join(tmpdir(), 'gantry-failover-'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const server = launch(['server', '--data-dir', join(dataDir, 'server'), '--port', String(port)], join(dataDir, 'server.log'));
  const serverStartedAt = Date.now();
  let stopping = false;
  server.once('exit', (code, sig) => stopping || console.error(`server exited (${code ?? sig}); log: ${join(dataDir, 'server.log')}`));
  await until(
    'server up',
    () => api(url, '/healthz').catch(() => ({ status: 0, body: null })),
    (r) => r.status === 200,
    20_000,
  );
  // As a user would: the admin token the server wrote into its data directory, a join token for the agents.
  useServerToken(url, join(dataDir, 'server'));
  const joinToken = (
    await api(url, '/v1/tokens', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'join', name: 'bench agents' }),
    })
  ).body.token as string;

  const agents = new Map<string, ChildProcess>();
  const startAgent = (name: string) =>
    agents.set(
      name,
      launch(['agent', '--server', url, '--name', name, '--data-dir', join(dataDir, name), '--cpu', '2', '--memory', '2Gi'], join(dataDir, `${name}.log`), {
        GANTRY_JOIN_TOKEN: joinToken,
      }),
    );
  startAgent('m1');
  startAgent('m2');
  const bothReadyAndIdle = () =>
    until(
      'both machines ready and idle',
      () => machines(url),
      (ms) => ms.length === 2 && ms.every((m) => m.health === 'ready' && m.allocated.cpuMillis === 0),
      60_000,
    );
  await bothReadyAndIdle();
  console.error(`gantry server at ${url}, data ${dataDir}; ${TRIALS} trials`);

  // The reconciler judges no machine for lostAfterMs after the server starts (restart grace);
  // the first kill must come after that, or trial 1 would measure the grace period.
  const graceEnd = serverStartedAt + cfg.lostAfterMs + 1000;
  if (Date.now() < graceEnd) await sleep(graceEnd - Date.now());

  const trials = [];
  for (let i = 1; i <= TRIALS; i++) {
    const sub = await submit(url, {
      name: `failover-${i}`,
      stages: [{ name: 'hold', resources: { cpu: 2, memory: '1Gi' }, command: ['sh', '-c', 'sleep 600'] }],
    });
    if (sub.status >= 300) throw new Error(`submit: ${sub.status} ${JSON.stringify(sub.body)}`);
    const jobId: string = sub.body.id;
    let first: Attempt | undefined;
    for (const limit = Date.now() + 30_000; !first; await sleep(POLL_MS)) {
      if (Date.now() > limit) throw new Error(`trial ${i}: first attempt not running in 30 s`);
      first = attemptsOf(await jobOf(url, jobId)).find((a) => a.state === 'running' && a.pid);
    }
    const dead = first.machine!;
    const other = dead === 'm1' ? 'm2' : 'm1';
    stagePgids.add(first.pid!);
    const killDelayMs = Math.round(Math.random() * KILL_DELAY_MAX_MS);
    await sleep(killDelayMs);

    // The machine dies: its agent and its processes, at once.
    const t0 = Date.now();
    agents.get(dead)!.kill('SIGKILL');
    process.kill(-first.pid!, 'SIGKILL');

    let next: Attempt | undefined;
    let seenAt = 0;
    const deadline = t0 + 60_000;
    while (!next) {
      if (Date.now() > deadline) throw new Error(`trial ${i}: no new running attempt 60 s after the kill: ${JSON.stringify(await jobOf(url, jobId))}`);
      await sleep(POLL_MS);
      const j = await jobOf(url, jobId);
      next = attemptsOf(j).find((a) => a.id !== first.id && a.state === 'running');
      seenAt = Date.now();
    }
    if (next.machine !== other) throw new Error(`trial ${i}: new attempt on ${next.machine}, expected ${other}`);
    if (next.pid) stagePgids.add(next.pid);
    const job = await jobOf(url, jobId);
    const lost = attemptsOf(job).find((a) => a.id === first.id)!;
    const deadMachine = (await machines(url)).find((m) => m.name === dead)!;

    const t = {
      trial: i,
      died: dead,
      to: other,
      killDelayMs,
      failoverMs: next.startedAt! - t0,
      pollSawMs: seenAt - t0,
      silentAtDeathMs: t0 - deadMachine.lastHeartbeatAt,
      deathToLostMs: lost.finishedAt != null ? lost.finishedAt - t0 : null,
      lostToRunningMs: lost.finishedAt != null ? next.startedAt! - lost.finishedAt : null,
      lostReason: lost.reason,
    };
    trials.push(t);
    console.error(
      `trial ${i}: ${dead} → ${other} ${t.failoverMs} ms (poll saw ${t.pollSawMs}; silent at death ${t.silentAtDeathMs}, ` +
        `lost after ${t.deathToLostMs}, then running in ${t.lostToRunningMs})`,
    );

    // Reset: cancel, bring the dead machine back under the same name and data dir.
    await api(url, `/v1/jobs/${jobId}/cancel`, { method: 'POST' });
    await until(
      'job canceled',
      () => jobOf(url, jobId),
      (j) => j.state === 'canceled',
      30_000,
    );
    startAgent(dead);
    await bothReadyAndIdle();
  }

  const ms = trials.map((t) => t.failoverMs);
  const seen = trials.map((t) => t.pollSawMs);
  const report = {
    machine: `${process.platform} ${process.arch}, ${cpus().length} cores (${cpus()[0]?.model.trim()}), ${Math.round(totalmem() / 1024 ** 3)} GiB, Node ${process.version}`,
    settings: {
      heartbeatMs: cfg.heartbeatMs,
      suspectAfterMs: cfg.suspectAfterMs,
      lostAfterMs: cfg.lostAfterMs,
      lostMachinesIntervalMs: cfg.lostMachinesIntervalMs,
      leaseMs: cfg.leaseMs,
      note: 'defaults; no GANTRY_* variables passed to the children',
    },
    killDelayMaxMs: KILL_DELAY_MAX_MS,
    setup: 'gantry server + agents m1, m2 (2 CPU, 2Gi each); one-stage job (cpu 2, memory 1Gi, sleep 600); kill = SIGKILL agent + stage process group',
    build: { ...build, distBuiltAt: new Date(build.distBuiltAt).toISOString() },
    trials,
    failoverMs: { n: ms.length, median: median(ms), p90: pct(ms, 90), worst: Math.max(...ms), min: Math.min(...ms) },
    pollSawMs: { median: median(seen), worst: Math.max(...seen) },
    predictedMs: { min: PREDICTED.minMs, max: PREDICTED.maxMs, formula: '[lostAfter − heartbeat, lostAfter + 1.2 × lostMachinesInterval] + scheduling/start' },
  };
  // Agents are restarted every trial: a rebuild of dist/ during the run would mix two versions.
  if (statSync(CLI).mtimeMs !== build.distBuiltAt) console.error('WARNING: dist/ was rebuilt during the run; the trials may mix code versions');
  console.log(JSON.stringify(report, null, 2));
  console.log(`median ${report.failoverMs.median} ms, worst ${report.failoverMs.worst} ms, predicted [${PREDICTED.minMs}, ${PREDICTED.maxMs}] ms`);
  stopping = true;
  await cleanup();
  rmSync(dataDir, { recursive: true, force: true });
}

let code = 0;
const onSignal = () => void cleanup().then(() => process.exit(130));
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);
try {
  await main();
} catch (err) {
  console.error(err);
  code = 1;
} finally {
  await cleanup();
}
process.exit(code);
