/**
 * The cluster under test for the fault-injection suite: a real `gantry server` and real
 * `gantry agent` processes (the built CLI), a JSON-lines history shared by every stage process
 * and the harness, the faults (SIGKILL, SIGSTOP/SIGCONT, machine death, server restart), and the
 * collection of what the invariant checker needs.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { dropPostgresSchema } from '../../src/store/postgres/open-postgres-store.js';
import { removeAgentCgroups } from '../../src/agent/contain/agent-cgroups.js';
import { freshSchema, POSTGRES_URL } from '../support/services.js';
import { appendFileSync, chmodSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobView } from '../../src/api/contract/job-view.js';
import { api, CLI, REPO, until, useServerToken } from '../support/gantry-process.js';
import { checkInvariants, formatViolations, parseHistory, type HarnessLine, type HistoryLine, type ProcLine, type Violation } from './check-invariants.js';
import { attemptGroupAlive, findProcesses, killGroups } from './processes.js';

export const KILL_GRACE_MS = 1000;
export const FAST_TIMINGS: Record<string, string> = {
  GANTRY_HEARTBEAT_MS: '300',
  GANTRY_LEASE_MS: '2000',
  GANTRY_SUSPECT_AFTER_MS: '1000',
  GANTRY_LOST_AFTER_MS: '2000',
  GANTRY_ACK_TIMEOUT_MS: '3000',
  GANTRY_KILL_GRACE_MS: String(KILL_GRACE_MS),
  // The invariant checker reads every stage's log and outputs at once: not what rate limits are for.
  GANTRY_RATE_LIMIT: '0',
};

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const TERMINAL = new Set(['succeeded', 'failed', 'canceled']);

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export interface AgentOpts {
  gpus?: string;
  cpu?: number;
  env?: Record<string, string>;
  /** k=v labels, for placement. */
  labels?: string[];
}

interface AgentProc {
  proc: ChildProcess;
  opts: AgentOpts;
  exited: Promise<void>;
}

export class Cluster {
  readonly history: string;
  url = '';
  private server: ChildProcess | null = null;
  private serverExited: Promise<void> = Promise.resolve();
  readonly agents = new Map<string, AgentProc>();

  private constructor(
    readonly name: string,
    readonly dir: string,
    readonly port: number,
    private readonly serverEnv: Record<string, string>,
  ) {
    this.history = join(dir, 'history.jsonl');
    // The stages write here, and run as uids of their own (docs/containment.md): as a user of a
    // contained cluster would, the harness lets them in (the directory passable, the history and
    // the copies of their output writable by all); everything else in it stays root's.
    chmodSync(dir, 0o711);
    writeFileSync(this.history, '', { mode: 0o666 });
    chmodSync(this.history, 0o666);
    mkdirSync(`${this.history}.wrote`);
    chmodSync(`${this.history}.wrote`, 0o1777);
    this.url = `http://127.0.0.1:${port}`;
  }

  /** A cluster with its server up; agents are started by the scenario. */
  static async start(name: string, serverEnv: Record<string, string> = {}): Promise<Cluster> {
    const dir = mkdtempSync(join(tmpdir(), `gantry-faults-${name}-`));
    // GANTRY_FAULTS_STORE=postgres: the same scenarios against PostgreSQL, in a schema of the scenario's own.
    const pg: Record<string, string> =
      process.env.GANTRY_FAULTS_STORE === 'postgres' ? { GANTRY_DATABASE_URL: POSTGRES_URL, GANTRY_DATABASE_SCHEMA: freshSchema('faults') } : {};
    const c = new Cluster(name, dir, await freePort(), { ...pg, ...serverEnv });
    started.add(c);
    try {
      await c.startServer();
    } catch (err) {
      await c.cleanup(true);
      throw err;
    }
    return c;
  }

  /** Appends a harness line to the history. */
  note(what: string, extra: Record<string, unknown> = {}, t = Date.now()): number {
    const line: HarnessLine = { ev: 'harness', what, t, ...extra };
    appendFileSync(this.history, JSON.stringify(line) + '\n');
    return t;
  }

  readHistory(): HistoryLine[] {
    const text = readFileSync(this.history, 'utf8');
    // Only whole lines: each is one write(2), but the kernel copies a write into the page cache a
    // page at a time and a reader (a test polling while stages run) can see the part of a line
    // that falls before a page boundary before the rest lands. An unterminated tail is a line being
    // written, not a torn one; a bad line anywhere before it still fails.
    const { lines, bad } = parseHistory(text.slice(0, text.lastIndexOf('\n') + 1));
    if (bad.length) throw new Error(`torn history lines in ${this.history}:\n${bad.join('\n')}`);
    return lines;
  }

  procLines(): ProcLine[] {
    return this.readHistory().filter((l): l is ProcLine => l.ev !== 'harness');
  }

  harnessLines(): HarnessLine[] {
    return this.readHistory().filter((l): l is HarnessLine => l.ev === 'harness');
  }

  serverOutput(): string {
    const f = join(this.dir, 'server.out');
    return existsSync(f) ? readFileSync(f, 'utf8') : '';
  }

  agentOutput(name: string): string {
    const f = join(this.dir, 'agents', `${name}.log`);
    return existsSync(f) ? readFileSync(f, 'utf8') : '';
  }

  async startServer(): Promise<void> {
    const fd = openSync(join(this.dir, 'server.out'), 'a');
    const proc = spawn(process.execPath, [CLI, 'server', '--data-dir', join(this.dir, 'server'), '--port', String(this.port)], {
      cwd: REPO,
      env: { ...process.env, ...FAST_TIMINGS, ...this.serverEnv },
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    this.server = proc;
    this.serverExited = new Promise((r) => proc.once('exit', () => r()));
    this.note('server-start', { pid: proc.pid });
    await until(
      'server healthy',
      async () => {
        if (proc.exitCode !== null || proc.signalCode !== null)
          throw new Error(`server exited (${proc.exitCode ?? proc.signalCode}):\n${this.serverOutput().slice(-3000)}`);
        return api(this.url, '/healthz').then(
          (r) => r.status,
          () => 0,
        );
      },
      (s) => s === 200,
      30_000,
    );
    // The admin token it made at its first start (the same one after a restart), and a join token for the agents.
    useServerToken(this.url, join(this.dir, 'server'));
    if (!this.joinToken) {
      const r = await api(this.url, '/v1/tokens', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'join', name: 'fault harness agents' }),
      });
      if (r.status !== 201) throw new Error(`join token: ${r.status} ${JSON.stringify(r.body)}`);
      this.joinToken = r.body.token as string;
    }
  }

  /** The agents join with it (the first start of the server makes it). */
  private joinToken: string | null = null;

  async killServer(): Promise<void> {
    const proc = this.server;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill('SIGKILL');
    await this.serverExited;
    this.note('server-kill', { pid: proc.pid });
  }

  async startAgent(name: string, opts: AgentOpts = {}): Promise<void> {
    mkdirSync(join(this.dir, 'agents'), { recursive: true });
    const args = [
      CLI,
      'agent',
      '--server',
      this.url,
      '--name',
      name,
      '--data-dir',
      join(this.dir, 'agents', name),
      '--cpu',
      String(opts.cpu ?? 4),
      '--memory',
      '8Gi',
    ];
    if (opts.gpus) args.push('--gpus', opts.gpus);
    for (const l of opts.labels ?? []) args.push('--label', l);
    const fd = openSync(join(this.dir, 'agents', `${name}.log`), 'a');
    const proc = spawn(process.execPath, args, {
      cwd: REPO,
      env: { ...process.env, GANTRY_JOIN_TOKEN: this.joinToken ?? '', ...opts.env },
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    this.agents.set(name, { proc, opts, exited });
    this.note('agent-start', { machine: name, pid: proc.pid, fault: opts.env?.GANTRY_AGENT_FAULT ?? null });
    await until(
      `machine ${name} ready`,
      async () => {
        if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`agent ${name} exited:\n${this.agentOutput(name).slice(-3000)}`);
        return api(this.url, '/v1/machines').then(
          (r) => r.body.machines?.find((m: { name: string }) => m.name === name)?.health,
          () => null,
        );
      },
      (h) => h === 'ready',
      30_000,
    );
  }

  agentAlive(name: string): boolean {
    const a = this.agents.get(name);
    return !!a && a.proc.exitCode === null && a.proc.signalCode === null;
  }

  /**
   * Until the agent exits; after `ms`, an error with what it and the server printed last (a drain
   * that never ends timed a test out once in CI, 2026-12-06, with nothing to say where it waited).
   */
  async agentExited(name: string, ms = 25_000): Promise<void> {
    const a = this.agents.get(name);
    if (!a) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(`agent ${name} has not exited after ${ms} ms:\n${this.agentOutput(name).slice(-3000)}\n--- server:\n${this.serverOutput().slice(-3000)}`),
          ),
        ms,
      );
    });
    try {
      await Promise.race([a.exited, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Stop the agent with a signal and wait for it to exit (SIGTERM leaves its stages running, for a restart). */
  async stopAgent(name: string, signal: NodeJS.Signals): Promise<void> {
    const a = this.agents.get(name);
    if (!a || !this.agentAlive(name)) return;
    a.proc.kill(signal);
    await a.exited;
    this.note('stop-agent', { machine: name, pid: a.proc.pid, signal });
  }

  /** Send the agent a signal, without waiting for anything. */
  signalAgent(name: string, signal: NodeJS.Signals): void {
    const a = this.agents.get(name);
    if (!a || !this.agentAlive(name)) return;
    a.proc.kill(signal);
    this.note('signal-agent', { machine: name, pid: a.proc.pid, signal });
  }

  /** SIGKILL the agent alone (its detached stage processes survive, as after an agent crash). */
  async killAgent(name: string): Promise<void> {
    const a = this.agents.get(name);
    if (!a || !this.agentAlive(name)) return;
    a.proc.kill('SIGKILL');
    await a.exited;
    this.note('kill-agent', { machine: name, pid: a.proc.pid });
  }

  /** Machine death: SIGKILL the agent and every process group that started on that machine. */
  async killMachine(name: string): Promise<void> {
    const a = this.agents.get(name);
    a?.proc.kill('SIGKILL');
    const fromHistory = this.procLines()
      .filter((l) => l.ev === 'start' && l.machine === name && attemptGroupAlive(l.pid, l.attemptId))
      .map((l) => l.pid);
    const fromProc = findProcesses({ HISTORY: this.history, GANTRY_MACHINE: name }).map((p) => p.pgrp);
    const pids = killGroups([...fromHistory, ...fromProc]);
    await a?.exited;
    this.note('kill-machine', { machine: name, pids });
  }

  pause(name: string): number {
    this.agents.get(name)!.proc.kill('SIGSTOP');
    return this.note('sigstop', { machine: name });
  }

  /** Returns the time just before the signal: nothing the agent did after waking is earlier. */
  resume(name: string): number {
    const t = Date.now();
    this.agents.get(name)!.proc.kill('SIGCONT');
    return this.note('sigcont', { machine: name }, t);
  }

  /** Submits; resolves the job id once accepted (201, or 200 for a repeat of a keyed submit).
   *  Throws on a refusal or when the server is unreachable. */
  async submit(spec: { name: string }, idempotencyKey?: string): Promise<string> {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}) };
    const r = await api(this.url, '/v1/jobs', { method: 'POST', headers, body: JSON.stringify(spec) });
    if (r.status !== 201 && !(idempotencyKey && r.status === 200)) throw new Error(`submit ${spec.name}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    this.note('submit-accepted', { job: r.body.id, name: spec.name });
    return r.body.id as string;
  }

  async cancel(jobId: string): Promise<{ changed: boolean; t: number }> {
    const r = await api(this.url, `/v1/jobs/${jobId}/cancel`, { method: 'POST' });
    if (r.status !== 200) throw new Error(`cancel ${jobId}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    const t = this.note('cancel-accepted', { job: jobId, changed: r.body.changed, state: r.body.job.state });
    return { changed: r.body.changed, t };
  }

  async job(id: string): Promise<JobView> {
    const r = await api<JobView>(this.url, `/v1/jobs/${id}`);
    if (r.status !== 200) throw new Error(`GET job ${id}: HTTP ${r.status}`);
    return r.body;
  }

  async jobs(): Promise<JobView[]> {
    const list = await api<{ jobs: { id: string }[] }>(this.url, '/v1/jobs?limit=1000');
    if (list.status !== 200) throw new Error(`GET jobs: HTTP ${list.status}`);
    return Promise.all(list.body.jobs.map((j) => this.job(j.id)));
  }

  async waitAllTerminal(timeoutMs = 45_000): Promise<JobView[]> {
    return until(
      'every job terminal',
      () => this.jobs(),
      (js) => js.every((j) => TERMINAL.has(j.state)),
      timeoutMs,
    ).catch(async (err) => {
      throw new Error(
        `${(err as Error).message.slice(0, 300)}\nnon-terminal: ${(await this.jobs().catch(() => []))
          .filter((j) => !TERMINAL.has(j.state))
          .map(describeJob)
          .join('\n')}`,
      );
    });
  }

  /** Stage processes of this cluster still running (found by environment, whether or not they wrote a line yet). */
  liveStageProcesses() {
    return findProcesses({ HISTORY: this.history });
  }

  /**
   * The quiet period, then the check: every job terminal, wait `quietMs` and for stage processes
   * to be gone (bounded by the kill grace plus slack), then collect and run the checker.
   */
  async check(opts: { quietMs?: number } = {}): Promise<{ jobs: JobView[]; violations: Violation[]; report: string }> {
    await this.waitAllTerminal();
    await sleep(opts.quietMs ?? 1000);
    await until(
      'stage processes gone',
      async () => this.liveStageProcesses().length,
      (n) => n === 0,
      KILL_GRACE_MS + 4000,
    ).catch(() => {});
    const jobs = await this.jobs();
    const artifacts = new Map<string, string | null>();
    for (const j of jobs) {
      for (const s of j.stages) {
        if (!s.outputAttemptId) continue;
        const r = await api(this.url, `/v1/jobs/${j.id}/stages/${s.name}/outputs/out.txt`);
        artifacts.set(`${j.id}/${s.name}`, r.status === 200 ? String(r.body) : null);
      }
    }
    const { wrote, logs } = await this.outputsAndLogs(jobs);
    const violations = checkInvariants({
      jobs,
      history: this.readHistory(),
      artifacts,
      wrote,
      logs,
      alive: attemptGroupAlive,
      now: Date.now(),
      cancelBoundMs: KILL_GRACE_MS + 2000,
      heartbeatMs: Number(this.serverEnv.GANTRY_HEARTBEAT_MS ?? FAST_TIMINGS.GANTRY_HEARTBEAT_MS),
    });
    return { jobs, violations, report: formatViolations(violations) };
  }

  /** What each succeeded attempt's process wrote (the stage script's copy), and the server's log of it. */
  private async outputsAndLogs(jobs: JobView[]) {
    const wrote = new Map<string, { stdout: string; stderr: string }>();
    const logs = new Map<string, { stdout: string; stderr: string }>();
    const copy = (id: string, ext: string) => {
      try {
        return readFileSync(join(`${this.history}.wrote`, `${id}.${ext}`), 'utf8');
      } catch {
        return '';
      }
    };
    for (const j of jobs) {
      for (const s of j.stages) {
        for (const a of s.attempts) {
          if (a.state !== 'succeeded') continue;
          wrote.set(a.id, { stdout: copy(a.id, 'out'), stderr: copy(a.id, 'err') });
          logs.set(a.id, await this.attemptLog(j.id, s.name, a.number));
        }
      }
    }
    return { wrote, logs };
  }

  /** An attempt's log as the server serves it, per stream, every page. */
  async attemptLog(jobId: string, stage: string, attempt: number): Promise<{ stdout: string; stderr: string }> {
    const out = { stdout: [] as string[], stderr: [] as string[] };
    for (let after = 0; ;) {
      const r = await api(this.url, `/v1/jobs/${jobId}/stages/${stage}/logs?format=json&attempt=${attempt}&limit=1000&after=${after}`);
      if (r.status !== 200) throw new Error(`logs of ${jobId}/${stage} #${attempt}: ${r.status}`);
      const chunks = (r.body as { chunks: { id: number; stream: 'stdout' | 'stderr'; data: string }[] }).chunks;
      if (chunks.length === 0) break;
      for (const c of chunks) out[c.stream].push(c.data);
      after = chunks.at(-1)!.id;
    }
    return { stdout: out.stdout.join(''), stderr: out.stderr.join('') };
  }

  /** Kills everything this cluster started: agents, server, and every stage process group. Keeps the directory when `keep` or $GANTRY_FAULTS_KEEP. */
  async cleanup(keep: boolean): Promise<void> {
    for (const [, a] of this.agents) {
      if (a.proc.exitCode !== null || a.proc.signalCode !== null) continue;
      a.proc.kill('SIGCONT');
      a.proc.kill('SIGKILL');
      await Promise.race([a.exited, sleep(5000)]);
    }
    if (this.server && this.server.exitCode === null && this.server.signalCode === null) {
      this.server.kill('SIGKILL');
      await Promise.race([this.serverExited, sleep(5000)]);
    }
    const groups = [
      ...this.procLines()
        .filter((l) => l.ev === 'start')
        .map((l) => l.pid),
      ...this.liveStageProcesses().map((p) => p.pgrp),
    ];
    killGroups(groups);
    // The attempt cgroups of agents killed above (docs/containment.md): no later start sweeps them.
    for (const name of this.agents.keys()) await removeAgentCgroups(name, join(this.dir, 'agents', name)).catch(() => {});
    const schema = this.serverEnv.GANTRY_DATABASE_SCHEMA;
    if (schema && !keep) await dropPostgresSchema(POSTGRES_URL, schema).catch(() => {});
    if (!keep && !process.env.GANTRY_FAULTS_KEEP) rmSync(this.dir, { recursive: true, force: true });
    else console.log(`fault scenario ${this.name}: kept ${this.dir}`);
  }
}

export function describeJob(j: JobView): string {
  const st = j.stages.map(
    (s) =>
      `${s.name}=${s.state}[${s.attempts.map((a) => `${a.number}:${a.state}@${a.machine}${a.exitCode !== null ? `/${a.exitCode}` : ''}${a.signal ? `/${a.signal}` : ''}${a.reason ? `(${a.reason})` : ''}`).join(' ')}]`,
  );
  return `${j.id} ${j.name} ${j.state}: ${st.join(' ')}`;
}

export const stageOf = (j: JobView, name: string) => {
  const s = j.stages.find((x) => x.name === name);
  if (!s) throw new Error(`job ${j.id} has no stage ${name}`);
  return s;
};

/** Waits until a history line matches. */
export async function waitForLine(c: Cluster, what: string, pred: (l: ProcLine) => boolean, timeoutMs = 30_000): Promise<ProcLine> {
  const found = await until(
    what,
    async () => c.procLines().find(pred),
    (l) => l !== undefined,
    timeoutMs,
  );
  return found!;
}

const started = new Set<Cluster>();

/**
 * Registers, once per test file, the cleanup of every cluster its tests started: all their
 * processes killed after each test, and the directory kept when the test failed, for a look.
 */
export function cleanUpClustersAfterEach(afterEachHook: (fn: (ctx: { task: { result?: { state?: string } } }) => Promise<void>) => void): void {
  afterEachHook(async (ctx) => {
    const failed = ctx.task.result?.state === 'fail';
    for (const c of [...started]) {
      started.delete(c);
      await c.cleanup(failed);
    }
  });
}
