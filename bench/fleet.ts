/**
 * A fleet of simulated agents over the real protocol (issue 32): thousands of lightweight agents in
 * this process (bench/fleet/: each registers with the join token and speaks with its own
 * credential, heartbeats back to back at the server's default period, acknowledges assignments and
 * reports exit 0 after a short fake run) against the built `gantry server`, on SQLite and on
 * PostgreSQL with two replicas (NATS between them; half the fleet on each). For each fleet size:
 *
 * - idle: the fleet heartbeats and nothing else; the server's CPU (from /proc) per heartbeat and in
 *   cores, heartbeat latency (round trip minus the hold, of heartbeats held their whole period),
 *   the server's RSS;
 * - load: a steady stream of one-stage jobs (`--rate` a second, submitted to the replicas in turn);
 *   stages placed a second, the server's CPU, heartbeat latency meanwhile;
 * - a machine lost: one agent holding a long stage stops (its heartbeats stop, its connections
 *   close); the time until the server marks it lost, and until its stage is placed on another
 *   agent, against the bound of docs/failure-detection.md.
 *
 * The fleet runs in this process and costs CPU on the same cores: its own CPU is reported apart.
 *
 * Usage: npm run bench:fleet [-- --quick] [-- --agents 1000,5000,10000 --stores sqlite,postgres
 *   --idle-s 20 --load-s 30 --rate 50 --run-ms 500 --out bench/results/fleet.md --old-agents
 *   --max-heartbeats-per-second 2500 --lose 1000];
 * `--old-agents`: agents that ignore the period the server gives (as agents before it did): the
 * server's cost at the configured period, for a peer in the same run.
 * `--fleet-procs N`: the simulated agents spread over N processes (bench/fleet/fleet-procs.ts; 2, the
 * default since the thirty-third session; 1 keeps them all in this one, as runs before it did): a
 * heartbeat's round trip includes the fleet's own lateness, which one process for 10,000 agents adds
 * (the split table says how much; docs/throughput.md, "The fleet's own loop").
 * `--lose N`: after the single lost machine, a mass loss: N machines, each holding one long stage,
 * stop at once (a rack or a zone gone); when the last of them is marked lost and the last of their
 * stages is placed elsewhere, against the bound (bench/fleet/mass-loss.ts).
 * GANTRY_BENCH_PROF=DIR profiles the servers (--cpu-prof, written when they exit) and writes DIR/windows.json, the idle and load windows on the profiles' clock, for bench/loop-stretches.ts; GANTRY_BENCH_LOGS=DIR
 * keeps their output (which transactions gave up, their warnings); GANTRY_BENCH_SERVER_FLAGS="--flag …"
 * gives the servers alone Node's and V8's flags (`--max-semi-space-size=64`, say).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Fleet, type FleetLike, type FleetWindow } from './fleet/fleet.js';
import { ProcFleet } from './fleet/fleet-procs.js';
import { adminGet, adminPost, type FleetServers, type FleetStore, startFleetServers } from './fleet/fleet-servers.js';
import { type MassLoss, massLoss } from './fleet/mass-loss.js';
import { percentile } from './peers/chain-workload.js';
import { processCpuMs, trackCommandCpu } from './peers/proc-cpu.js';
import { arg, machineAndCommit, num, usageIfAsked } from './results-header.js';
import { REPO } from '../test/support/gantry-process.js';

usageIfAsked(import.meta.url);
const QUICK = process.argv.includes('--quick');
const SIZES = arg('agents', QUICK ? '1000' : '1000,5000,10000')
  .split(',')
  .map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--agents takes fleet sizes, as 1000,5000; got ${s}`);
    return n;
  });
const STORES = arg('stores', QUICK ? 'sqlite' : 'sqlite,postgres')
  .split(',')
  .map((s) => {
    if (s !== 'sqlite' && s !== 'postgres') throw new Error(`--stores takes sqlite and/or postgres; got ${s}`);
    return s;
  });
const IDLE_S = num('idle-s', QUICK ? 10 : 20);
const LOAD_S = num('load-s', QUICK ? 15 : 30);
const RATE = num('rate', 50);
const RUN_MS = num('run-ms', 500);
const OUT = arg('out', join(REPO, 'bench/results/fleet.md'));
const PROF = process.env.GANTRY_BENCH_PROF;
/** GANTRY_BENCH_LOGS=DIR: each server's output written there after each size (DIR must exist). */
const LOGS = process.env.GANTRY_BENCH_LOGS;
/** GANTRY_BENCH_SERVER_FLAGS="--flag …": Node's and V8's flags for the servers alone (the fleet's own process runs without them). */
const SERVER_FLAGS = (process.env.GANTRY_BENCH_SERVER_FLAGS ?? '').split(' ').filter(Boolean);
const OLD_AGENTS = process.argv.includes('--old-agents');
/** The servers' GANTRY_MAX_HEARTBEATS_PER_SECOND (their default, 2,500, unless given). */
const MAX_HB_RATE = arg('max-heartbeats-per-second', '');
/** `--lose N`: machines stopped at once after the single lost machine (0: no mass loss). */
const LOSE = num('lose', 0);
/** `--fleet-procs N`: the simulated agents spread over N processes (fleet-procs.ts); 2 by default (a real fleet is a process a machine; one process for 10,000 was itself late); 1: all in this one, as runs before the thirty-third session. */
const FLEET_PROCS = num('fleet-procs', 2);
if (!Number.isInteger(FLEET_PROCS) || FLEET_PROCS < 1) throw new Error(`--fleet-procs takes a whole number of processes, 1 or more; got ${FLEET_PROCS}`);
/** The server's defaults (docs/failure-detection.md), which the bench leaves as they are. */
const HEARTBEAT_MS = 2000;
const LOST_AFTER_MS = 10_000;
const REAP_WORST_MS = 1.2 * 1000;

/** The machine's heartbeat as the API shows it (absent from servers before the period grew with the fleet). */
interface HeartbeatView {
  periodMs: number;
  lostAfterMs: number;
  lostWithinMs: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface Cpu {
  servers: number[];
  postgres: number;
  nats: number;
  fleet: number;
}

/** CPU ms spent from now until `stop()`: each server process, PostgreSQL and NATS (every process of those names here: other users' too), and the fleet (this process and its fleet processes). */
function cpuMeter(servers: FleetServers, fleet: FleetLike): { stop(): Cpu } {
  const fleetPids = fleet.pids;
  const c0 = fleetPids.map((p) => processCpuMs(p) ?? 0);
  const s0 = servers.procs.map((p) => processCpuMs(p.pid!) ?? 0);
  const pg = servers.store === 'postgres' ? trackCommandCpu('postgres') : null;
  const nats = servers.store === 'postgres' && servers.procs.length > 1 ? trackCommandCpu('nats-server') : null;
  const f0 = process.cpuUsage();
  return {
    stop() {
      const f = process.cpuUsage(f0);
      return {
        servers: servers.procs.map((p, i) => (processCpuMs(p.pid!) ?? 0) - s0[i]!),
        postgres: pg?.stop() ?? 0,
        nats: nats?.stop() ?? 0,
        fleet: (f.user + f.system) / 1000 + fleetPids.reduce((n, p, i) => n + (processCpuMs(p) ?? 0) - c0[i]!, 0),
      };
    },
  };
}

function rssMiB(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

interface Phase {
  w: FleetWindow;
  cpu: Cpu;
  rss: number[];
}

interface Lost {
  /** The stopped machine's period and its bound for being lost, as the API showed them before it stopped. */
  heartbeat?: HeartbeatView;
  /** Agent stopped → the server says its machine is lost (ms). */
  lostMs: number | null;
  /** Agent stopped → its stage assigned to another agent (ms). */
  elsewhereMs: number | null;
  /** Why nothing was timed. */
  note?: string;
}

interface RunResult {
  store: FleetStore;
  agents: number;
  replicas: number;
  registerS: number;
  /** Fleet started → every agent has had two heartbeats answered. */
  settleS: number;
  idle: Phase;
  load: Phase;
  jobsSubmitted: number;
  lost: Lost;
  /** `--lose N`'s mass loss, when asked for. */
  mass?: MassLoss;
  busyErrors: number;
  /** Agent requests answered 5xx or 429 (retried). */
  retried: number;
  /** Of those, heartbeats shed by a server past its budget (docs/failure-detection.md). */
  shed: number;
  errors: string[];
}

/** The monotonic clock in µs, the clock a `--cpu-prof` profile's timestamps are on (both are CLOCK_MONOTONIC on Linux). */
const monoUs = () => Number(process.hrtime.bigint() / 1000n);
/** Each measured window, on the profiles' clock, written beside them (bench/loop-stretches.ts reads it). */
const windows: { name: string; from: number; to: number }[] = [];

async function measure(fleet: FleetLike, servers: FleetServers, seconds: number, name: string): Promise<Phase> {
  await fleet.window();
  const meter = cpuMeter(servers, fleet);
  const from = monoUs();
  await sleep(seconds * 1000);
  const cpu = meter.stop();
  const w = await fleet.window();
  windows.push({ name, from, to: monoUs() });
  if (PROF) writeFileSync(join(PROF, 'windows.json'), JSON.stringify(windows));
  return { w, cpu, rss: servers.procs.map((p) => rssMiB(p.pid!)) };
}

async function lostMachine(fleet: FleetLike, servers: FleetServers): Promise<Lost> {
  const { urls, admin } = servers;
  const { jobs } = await adminPost<{ jobs: { id: string }[] }>(urls[0]!, '/v1/jobs/batch', admin, {
    jobs: [{ name: 'fleet-lost', stages: [{ name: 'long', command: ['sleep', '600'], resources: { cpu: '100m', memory: '16Mi' } }] }],
  });
  const jobId = jobs[0]!.id;
  let holder: { agent: string; machineId: string } | undefined;
  for (let i = 0; i < 300 && !holder; i++) {
    const t = fleet.taken.find((x) => x.a.jobId === jobId);
    if (t && (await fleet.runningOf([t.agent]))[0]! > 0) holder = t;
    else await sleep(100);
  }
  // Behind what the load left queued, the long stage may not be placed at all: said so, not timed.
  if (!holder) return { lostMs: null, elsewhereMs: null, note: 'its long stage was not placed within 30 s (behind the queue the load left)' };
  const shown = await adminGet<{ heartbeat?: HeartbeatView }>(urls[0]!, `/v1/machines/${holder.machineId}`, admin).catch(() => null);
  const t0 = performance.now();
  await fleet.kill([holder.agent]);
  let lostMs: number | null = null;
  let elsewhereMs: number | null = null;
  while (performance.now() - t0 < 30_000 && (lostMs === null || elsewhereMs === null)) {
    if (lostMs === null) {
      const m = await adminGet<{ health: string }>(urls[0]!, `/v1/machines/${holder.machineId}`, admin).catch(() => null);
      if (m?.health === 'lost') lostMs = performance.now() - t0;
    }
    const other = fleet.taken.find((x) => x.a.jobId === jobId && x.agent !== holder.agent);
    if (elsewhereMs === null && other) elsewhereMs = other.at - t0;
    await sleep(50);
  }
  return { lostMs, elsewhereMs, ...(shown?.heartbeat ? { heartbeat: shown.heartbeat } : {}) };
}

async function runOne(store: FleetStore, agents: number): Promise<RunResult> {
  const replicas = store === 'postgres' ? 2 : 1;
  console.error(`${store} × ${replicas}, ${agents} agents: starting`);
  const servers = await startFleetServers({
    store,
    replicas,
    // One join token registers the whole fleet within seconds: past a script's rate limit (50/s), which a real fleet joining over hours is not.
    // GANTRY_HEARTBEAT_TIMING: each heartbeat's answer says when the server read it, began it and answered it, on the host's clock (the split table).
    env: { GANTRY_RATE_LIMIT: '0', GANTRY_HEARTBEAT_TIMING: '1', ...(MAX_HB_RATE ? { GANTRY_MAX_HEARTBEATS_PER_SECOND: MAX_HB_RATE } : {}) },
    nodeFlags: [...SERVER_FLAGS, ...(PROF ? ['--cpu-prof', `--cpu-prof-dir=${PROF}`] : [])],
  });
  const options = {
    servers: servers.urls,
    joinToken: servers.joinToken,
    count: agents,
    prefix: 'sim',
    cpuMillis: 4000,
    memoryBytes: 16 * 2 ** 30,
    runMs: RUN_MS,
    registerConcurrency: 32,
    oldAgents: OLD_AGENTS,
  };
  const fleet: FleetLike = FLEET_PROCS > 1 ? new ProcFleet(options, FLEET_PROCS) : new Fleet(options);
  // The servers' output written every 15 s as well as at the end: a run that collapses and is
  // stopped (a timeout, ^C) keeps what its servers said until then (branch `collapse`).
  const writeLogs = () => {
    if (LOGS) servers.procs.forEach((_p, i) => writeFileSync(join(LOGS, `${store}-${agents}-r${i + 1}.log`), servers.output(i)));
  };
  const logsTimer = LOGS ? setInterval(writeLogs, 15_000) : null;
  let submitting = true;
  let jobsSubmitted = 0;
  try {
    const r0 = performance.now();
    await fleet.start();
    const registerS = (performance.now() - r0) / 1000;
    console.error(`  registered in ${registerS.toFixed(1)} s; settling`);
    // Until every agent has had two heartbeats answered: right after the start, some first ones take seconds (docs/throughput.md).
    const settleS = await fleet.settled(2, 300_000);
    const idle = await measure(fleet, servers, IDLE_S, `${store} ${agents} idle`);
    console.error(`  idle: ${idle.w.heartbeats} heartbeats, server CPU ${idle.cpu.servers.map((c) => c.toFixed(0)).join('+')} ms`);
    // A steady stream: `RATE` one-stage jobs a second, to the replicas in turn.
    const submitter = (async () => {
      let i = 0;
      while (submitting) {
        const t = performance.now();
        const specs = Array.from({ length: RATE }, (_, k) => ({
          name: `fleet-${i}-${k}`,
          stages: [{ name: 'only', command: ['true'], resources: { cpu: '100m', memory: '16Mi' } }],
        }));
        await adminPost(servers.urls[i % servers.urls.length]!, '/v1/jobs/batch', servers.admin, { jobs: specs });
        jobsSubmitted += RATE;
        i++;
        await sleep(1000 - (performance.now() - t));
      }
    })();
    await sleep(2000);
    const load = await measure(fleet, servers, LOAD_S, `${store} ${agents} load`);
    submitting = false;
    await submitter;
    console.error(`  load: ${load.w.assigned} placed in ${load.w.seconds.toFixed(0)} s`);
    const lost = await lostMachine(fleet, servers);
    console.error(`  lost machine: ${JSON.stringify(lost)}`);
    // Each long stage takes a whole agent (its 4 CPUs), so that N stages are N machines.
    const mass = LOSE > 0 ? await massLoss(fleet, servers, { n: LOSE, cpu: '4', watchMs: 60_000 }) : undefined;
    if (mass) console.error(`  mass loss: ${JSON.stringify(mass)}`);
    const busyErrors = servers.procs.reduce((n, _p, i) => n + (servers.output(i).match(/StoreBusyError/g)?.length ?? 0), 0);
    // Which transactions gave up, and what else the servers said: their whole output, to read after.
    writeLogs();
    return {
      store,
      agents,
      replicas,
      registerS,
      settleS,
      idle,
      load,
      jobsSubmitted,
      lost,
      ...(mass ? { mass } : {}),
      busyErrors,
      retried: fleet.retried,
      shed: fleet.shed,
      errors: fleet.errors.slice(0, 5),
    };
  } catch (err) {
    // A server that died is the finding, not the fleet's refused connections: say which, and how.
    const died = servers.procs.flatMap((p, i) => (p.exitCode !== null || p.signalCode !== null ? [`r${i + 1} exited (${p.exitCode ?? p.signalCode})`] : []));
    for (const [i, p] of servers.procs.entries())
      if (p.exitCode !== null || p.signalCode !== null) console.error(`server r${i + 1}, last output:\n${servers.output(i).slice(-4000)}`);
    if (died.length && err instanceof Error) err.message = `${died.join(', ')}; ${err.message}`;
    throw err;
  } finally {
    if (logsTimer) clearInterval(logsTimer);
    submitting = false;
    await fleet.stop();
    await servers.stop();
  }
}

const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** docs/failure-detection.md: lost no sooner than its allowance less 1.5 periods after it died, no later than the allowance and a reaper's pass. */
function bound(h?: HeartbeatView): { best: number; worst: number } {
  if (!h) return { best: LOST_AFTER_MS - 1.5 * HEARTBEAT_MS, worst: LOST_AFTER_MS + REAP_WORST_MS };
  return { best: h.lostAfterMs - 1.5 * h.periodMs, worst: h.lostWithinMs };
}

function row(r: RunResult): string {
  const hb = (p: Phase) => `${f1(percentile(p.w.heartbeatOverMs, 50))} / ${f1(percentile(p.w.heartbeatOverMs, 99))}`;
  const cores = (p: Phase) => sum(p.cpu.servers) / 1000 / p.w.seconds;
  const perHb = sum(r.idle.cpu.servers) / r.idle.w.heartbeats;
  const lost = (ms: number | null) => (r.lost.note ? 'not measured' : ms === null ? 'not within 30 s' : `${f1(ms / 1000)} s`);
  return [
    `| ${r.store}${r.replicas > 1 ? ` × ${r.replicas}` : ''}`,
    r.agents.toLocaleString('en'),
    `${f1(r.registerS)} / ${f1(r.settleS)}`,
    f1(r.idle.w.heartbeats / r.idle.w.seconds),
    f2(perHb),
    f2(cores(r.idle)),
    hb(r.idle),
    r.idle.rss.map((x) => x.toFixed(0)).join(' + '),
    f1(r.load.w.assigned / r.load.w.seconds),
    f2(cores(r.load)),
    hb(r.load),
    f2(r.idle.cpu.fleet / 1000 / r.idle.w.seconds) + ' / ' + f2(r.load.cpu.fleet / 1000 / r.load.w.seconds),
    `${f1(r.idle.w.fleetLoopDelayP99Ms)} / ${f1(r.load.w.fleetLoopDelayP99Ms)}`,
    r.store === 'postgres' ? `${f2(r.idle.cpu.postgres / 1000 / r.idle.w.seconds)} / ${f2(r.load.cpu.postgres / 1000 / r.load.w.seconds)}` : '',
    r.lost.heartbeat ? `${r.lost.heartbeat.periodMs} ms, ${f1(bound(r.lost.heartbeat).best / 1000)}–${f1(bound(r.lost.heartbeat).worst / 1000)} s` : '',
    lost(r.lost.lostMs),
    lost(r.lost.elsewhereMs),
    `${r.busyErrors} / ${r.retried} (${r.shed} shed) |`,
  ].join(' | ');
}

/** The parts of a window's heartbeats answered empty, on one clock: each part's p50 / p99, and what the slowest 1 % (by their sum) spent in each, on average. */
function splitCells(w: FleetWindow): string[] {
  const parts = ['inMs', 'preMs', 'serverOverMs', 'backMs'] as const;
  const n = w.split.inMs.length;
  if (n === 0) return [...parts.map(() => '–'), '–', '–', `${f1(w.fleetLoopDelayP50Ms)} / ${f1(w.fleetLoopDelayP99Ms)}`];
  const total = w.split.inMs.map((_, i) => parts.reduce((a, k) => a + w.split[k][i]!, 0));
  const slowest = [...total.keys()].sort((a, b) => total[b]! - total[a]!).slice(0, Math.max(1, Math.round(n / 100)));
  const mean = (k: (typeof parts)[number]) => sum(slowest.map((i) => w.split[k][i]!)) / slowest.length;
  return [
    ...parts.map((k) => `${f1(percentile(w.split[k], 50))} / ${f1(percentile(w.split[k], 99))}`),
    `${f1(percentile(total, 50))} / ${f1(percentile(total, 99))}`,
    `${slowest.length}: ${parts.map((k) => f1(mean(k))).join(' / ')}`,
    `${f1(w.fleetLoopDelayP50Ms)} / ${f1(w.fleetLoopDelayP99Ms)}`,
  ];
}

/** Where each heartbeat's time went (GANTRY_HEARTBEAT_TIMING), idle and under load. */
function splitTable(results: RunResult[]): string[] {
  if (!results.length) return [];
  return [
    "Where a heartbeat's time over its hold went, on one clock (the host's: `performance.timeOrigin + performance.now()` in the fleet and in the server, whose answers say when it read the request, began its handler and handed the answer to the socket: `GANTRY_HEARTBEAT_TIMING=1`); heartbeats answered empty, ms. **in**: the agent's send → the server read it (the fleet's write, the kernel, the server's loop reaching it); **pre**: read → handler (body, authentication, validation); **server**: handler → answer handed to the socket, less the hold (the deadline's timer late, the reads, the serialising); **back**: answer handed to the socket → the agent read it whole (the kernel, the fleet's loop reaching it). A server that sends no timing (a build before it) leaves the parts empty.",
    '',
    '| store | agents | window | in p50 / p99 | pre p50 / p99 | server p50 / p99 | back p50 / p99 | sum p50 / p99 | slowest 1 % (n): mean in / pre / server / back | fleet loop delay p50 / p99 | fleet cores |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...results.flatMap((r) =>
      (['idle', 'load'] as const).map((k) => {
        const p = r[k];
        return `| ${r.store}${r.replicas > 1 ? ` × ${r.replicas}` : ''} | ${r.agents.toLocaleString('en')} | ${k} | ${splitCells(p.w).join(' | ')} | ${f2(p.cpu.fleet / 1000 / p.w.seconds)} |`;
      }),
    ),
    '',
  ];
}

/** `--lose N`'s table: when the last of N machines stopped at once was marked lost, and the last of their stages placed elsewhere. */
function massTable(results: RunResult[]): string[] {
  const rs = results.filter((r) => r.mass);
  if (!rs.length) return [];
  const s = (ms: number | null) => (ms === null ? '–' : `${f1(ms / 1000)} s`);
  return [
    `Mass loss (\`--lose\`): that many machines, each running one long stage, stopped at once; the machine list read once a second from the last replica (so "lost" reads up to a second late), the stages' new assignments as the fleet received them.`,
    '',
    '| store | agents | machines stopped at once | their period, their bound | first / last seen lost | seen lost | first / last stage elsewhere | stages elsewhere |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rs.map((r) => {
      const m = r.mass!;
      const b = m.heartbeat ? `${m.heartbeat.periodMs} ms, ${f1(bound(m.heartbeat).best / 1000)}–${f1(bound(m.heartbeat).worst / 1000)} s` : '';
      if (m.note) return `| ${r.store} | ${r.agents.toLocaleString('en')} | ${m.lost} | not measured: ${m.note} | | | | |`;
      return `| ${r.store}${r.replicas > 1 ? ` × ${r.replicas}` : ''} | ${r.agents.toLocaleString('en')} | ${m.lost.toLocaleString('en')} | ${b} | ${s(m.firstLostMs)} / ${s(m.allLostMs)} | ${m.seenLost} | ${s(m.firstElsewhereMs)} / ${s(m.allElsewhereMs)} | ${m.elsewhere} |`;
    }),
    '',
  ];
}

function write(results: RunResult[]): void {
  const lines = [
    '# A fleet of simulated agents (`npm run bench:fleet`)',
    '',
    machineAndCommit(REPO),
    `- **Run:** \`npm run bench:fleet -- ${process.argv.slice(2).join(' ')}\` on ${new Date().toISOString().slice(0, 16)}Z; idle ${IDLE_S} s, load ${LOAD_S} s at ${RATE} one-stage jobs a second, fake run ${RUN_MS} ms, each agent 4 CPUs; the fleet in ${FLEET_PROCS === 1 ? 'this one process' : `${FLEET_PROCS} processes`}; the server's default timings (heartbeat ${HEARTBEAT_MS} ms, grown with the fleet to at most ${MAX_HB_RATE ? Number(MAX_HB_RATE).toLocaleString('en') : '2,500'} heartbeats a second, lost after 10 s at that period)${OLD_AGENTS ? '; **old agents**: every agent ignores the period the server gives, and heartbeats every ' + HEARTBEAT_MS + ' ms' : ''}.`,
    '- **Noise:** two cores shared with other work (four other helpers built and tested beside it), and the fleet itself runs on the same cores: its CPU is its own column. PostgreSQL and NATS CPU is every process of those names on the host, other users included.',
    '',
    '| store | agents | register / settle (s) | heartbeats/s | server CPU per heartbeat (ms) | server cores, idle | heartbeat p50 / p99 over its hold, idle (ms) | server RSS (MiB) | stages placed/s, load | server cores, load | heartbeat p50 / p99, load (ms) | fleet cores idle / load | fleet event-loop delay p99, idle / load (ms) | postgres cores idle / load | lost machine: its period, its bound | machine lost after | its stage elsewhere after | StoreBusyError in server logs / agent requests retried (5xx, 429; heartbeats shed) |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ...results.map(row),
    '',
    `Heartbeat latency is the round trip of a heartbeat answered empty (held its whole period) minus that hold: what the server took to write it and answer, and the queues of both processes (the fleet's own stalls among them: its event-loop delay has its column). Server CPU per heartbeat is all the servers' CPU over the idle window (their loops included) over the heartbeats answered. "Placed" counts assignments the fleet received. "Machine lost after" is when a poll of the machine (every 50 ms, through the API) first saw it lost, so it can read a little later than "its stage elsewhere". The documented bound for a lost machine's stage to run elsewhere is ${f1(bound().best / 1000)}–${f1(bound().worst / 1000)} s at the configured period, and grows with the period the server gave the machine (its column, as \`GET /v1/machines/ID\` showed it; docs/failure-detection.md, "A period that grows with the fleet"). See docs/throughput.md, "A fleet of agents", for what the figures mean and the levers.`,
    '',
    ...splitTable(results),
    ...massTable(results),
    ...failed.map((f) => `**Did not finish:** ${f}\n`),
    ...results.flatMap((r) => (r.lost.note ? [`Machine lost, ${r.store} ${r.agents}: not measured, ${r.lost.note}.`, ''] : [])),
    ...results.flatMap((r) => (r.errors.length ? [`Fleet errors, ${r.store} ${r.agents}: ${r.errors.map((e) => `\`${e}\``).join('; ')}`, ''] : [])),
  ];
  writeFileSync(OUT, lines.join('\n'));
}

const results: RunResult[] = [];
/** Runs that did not finish, and why: said in the results file, not dropped. */
const failed: string[] = [];
for (const store of STORES)
  for (const n of SIZES) {
    try {
      results.push(await runOne(store, n));
    } catch (err) {
      console.error(err);
      failed.push(`${store}, ${n.toLocaleString('en')} agents: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    }
    write(results);
  }
console.log(readFileSync(OUT, 'utf8'));
