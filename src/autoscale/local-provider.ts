import { type ChildProcess, spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describeTemplate, templateEntry, type TemplateEntry } from './pool-template.js';
import type { MachineProvider, StartedMachine, StartRequest } from './provider.js';

/**
 * The `local` provider (issue 30, docs/autoscaling.md "Providers"): each machine is a `gantry
 * agent` child process on this host offering the template's declared resources, started as
 * `gantry up` starts its agents (the same command line, `--exit-with-parent`, a data directory
 * `<dataDir>/agents/<name>`, the join token and CA in its environment). For trying autoscaling on
 * one host and for the tests that prove it; the machines are stand-ins, their GPUs declared.
 *
 * Idempotent by name within this process: a name whose child runs (or waits to be restarted) is
 * answered as started. Its children die with it (`--exit-with-parent`: their stdin closes however
 * this process ends, SIGKILL included), so after a restart no agent of the old process is left and
 * asking again starts each name once more, with the data directory it had.
 */

/** How one local agent is run; the server passes server/agent-command-line.ts's, the one `gantry up` uses. */
export type AgentCommandLine = (machine: TemplateEntry & { name: string }, serverUrl: string, dataDir: string) => { command: string; args: string[] };

export interface LocalProviderOptions {
  agentCommandLine: AgentCommandLine;
  /** The server's data directory: each agent keeps its state in `<dataDir>/agents/<name>`. */
  dataDir: string;
  /** How long a stopped agent has between SIGTERM and SIGKILL (default 7 s: its stages' own grace, and a little). */
  graceMs?: number;
  /** One line per start, exit, restart and stop (default: stderr). */
  log?: (line: string) => void;
  /** Where the agents' own output goes: this process's (as `gantry up`'s), or nowhere (tests). */
  agentOutput?: 'inherit' | 'ignore';
  /** The agents' environment before the join token and CA are added (default: this process's). */
  env?: NodeJS.ProcessEnv;
}

/** As `gantry up`: an agent that dies is started again this long after, with the same data directory. */
const RESTART_DELAY_MS = 1000;

interface LocalMachine {
  name: string;
  req: StartRequest;
  child: ChildProcess | null;
  restart: NodeJS.Timeout | null;
  /** Set by stop() and close(): its exit is expected, no restart follows; resolves once it is gone. */
  stopping: Promise<void> | null;
}

export class LocalProvider implements MachineProvider {
  private readonly machines = new Map<string, LocalMachine>();
  private readonly graceMs: number;
  private readonly log: (line: string) => void;

  constructor(private readonly opts: LocalProviderOptions) {
    this.graceMs = opts.graceMs ?? 7000;
    this.log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
  }

  async start(req: StartRequest): Promise<StartedMachine[]> {
    const started: StartedMachine[] = [];
    const problems: string[] = [];
    for (const name of req.names) {
      const known = this.machines.get(name);
      if (known && !known.stopping) {
        started.push(this.answer(known));
        continue;
      }
      // Asked again while it stops: the old agent lets go of its data directory before a new one takes it.
      if (known?.stopping) await known.stopping;
      const m: LocalMachine = { name, req, child: null, restart: null, stopping: null };
      // In the map before the spawn resolves, so a start of the same name meanwhile finds it.
      this.machines.set(name, m);
      try {
        await this.spawn(m);
        started.push(this.answer(m));
      } catch (err) {
        if (this.machines.get(name) === m) this.machines.delete(name);
        problems.push(`${name}: ${(err as Error).message}`);
      }
    }
    if (started.length === 0 && problems.length > 0) throw new Error(`local provider could not start gantry agent: ${problems.join('; ')}`);
    return started;
  }

  async stop(req: { pool: string; machines: { name: string; providerId: string | null }[] }): Promise<string[]> {
    await Promise.all(req.machines.map((m) => this.stopOne(m.name)));
    return req.machines.map((m) => m.name);
  }

  async close(): Promise<void> {
    await Promise.all([...this.machines.keys()].map((name) => this.stopOne(name)));
  }

  /** The pid of the agent it runs now; none while it waits to be restarted. */
  private answer(m: LocalMachine): StartedMachine {
    return m.child?.pid !== undefined ? { name: m.name, providerId: `local:${m.child.pid}` } : { name: m.name };
  }

  /** Resolves once the child runs; rejects when it could not be started (no Node there, a bad working directory). */
  private spawn(m: LocalMachine): Promise<void> {
    const { req } = m;
    const dir = resolve(join(this.opts.dataDir, 'agents', m.name));
    const cmd = this.opts.agentCommandLine({ name: m.name, ...templateEntry(req.template) }, req.server, dir);
    const out = this.opts.agentOutput ?? 'inherit';
    const env = { ...(this.opts.env ?? process.env), GANTRY_JOIN_TOKEN: req.joinToken, ...(req.ca ? { GANTRY_CA: resolve(req.ca) } : {}) };
    // stdin a pipe this process holds: --exit-with-parent stops the agent when it closes.
    const child = spawn(cmd.command, cmd.args, { stdio: ['pipe', out, out], env });
    return new Promise<void>((ok, fail) => {
      child.once('error', fail);
      child.once('spawn', () => {
        child.off('error', fail);
        // After the start, an error (a signal that could not be sent) is logged: its exit, if any, says the rest.
        child.on('error', (err) => this.log(`local provider: agent ${m.name}: ${err.message}`));
        m.child = child;
        // Stopped while it was being started: what stop() found was no child, so this one goes now.
        if (m.stopping) child.kill('SIGTERM');
        this.log(`local provider: started agent ${m.name} (pid ${child.pid}, pool ${req.pool}: ${describeTemplate(req.template)})`);
        child.once('exit', (code, signal) => this.exited(m, child, code, signal));
        ok();
      });
    });
  }

  private exited(m: LocalMachine, child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (m.child === child) m.child = null;
    const how = signal ?? `code ${code}`;
    if (m.stopping) {
      this.log(`local provider: agent ${m.name} stopped (${how})`);
      return;
    }
    this.log(`local provider: agent ${m.name} exited (${how}); restarting it in 1 s`);
    this.restartLater(m);
  }

  private restartLater(m: LocalMachine): void {
    m.restart = setTimeout(() => {
      m.restart = null;
      if (m.stopping) return;
      this.spawn(m).catch((err: unknown) => {
        // Could not even start it: again a second later, until it is stopped (the boot timeout fails a machine that never joins).
        this.log(`local provider: agent ${m.name} could not be restarted (${(err as Error).message}); again in 1 s`);
        this.restartLater(m);
      });
    }, RESTART_DELAY_MS);
  }

  /** SIGTERM, then SIGKILL after the grace; resolves once the child is gone. A name with no child counts as stopped. */
  private stopOne(name: string): Promise<void> {
    const m = this.machines.get(name);
    if (!m) return Promise.resolve();
    m.stopping ??= this.terminate(m);
    return m.stopping;
  }

  private async terminate(m: LocalMachine): Promise<void> {
    const { name } = m;
    if (m.restart) clearTimeout(m.restart);
    m.restart = null;
    const child = m.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise<void>((r) => child.once('exit', () => r()));
      this.log(`local provider: stopping agent ${name} (SIGTERM, SIGKILL after ${this.graceMs / 1000} s)`);
      child.kill('SIGTERM');
      const timer = setTimeout(() => {
        this.log(`local provider: agent ${name} still running after ${this.graceMs / 1000} s: SIGKILL`);
        child.kill('SIGKILL');
      }, this.graceMs);
      await gone;
      clearTimeout(timer);
    }
    // A start of the same name while it stopped made a new entry: that one stays.
    if (this.machines.get(name) === m) this.machines.delete(name);
  }
}
