import { spawn } from 'node:child_process';
import { isAbsolute, resolve } from 'node:path';
import { Type, type Static, type TSchema } from 'typebox';
import { schemaIssues } from '../spec/schema-issues.js';
import { templateEntry, type TemplateEntry } from './pool-template.js';
import { ProviderClosedError, type MachineProvider, type StartedMachine, type StartRequest } from './provider.js';

/**
 * The `command` provider (issue 30, docs/autoscaling.md "Providers"): the operator's executable
 * starts and stops machines wherever they live (a cloud, a VM host, a batch system). One run per
 * request: a JSON request on its stdin, a JSON answer on its stdout, its stderr for people. It
 * must be idempotent by machine name (a name that runs already is answered as started, a name
 * that is gone as stopped): the autoscaler asks again after a restart or a leader change.
 */

/** What the executable reads on stdin to start machines (docs/autoscaling.md, "Providers"). */
export interface CommandStartRequest {
  action: 'start';
  pool: string;
  template: TemplateEntry;
  count: number;
  names: string[];
  server: string;
  joinToken: string;
  ca?: string;
}

/** What it reads to stop them; `id` is what its start answered, when it did. */
export interface CommandStopRequest {
  action: 'stop';
  pool: string;
  machines: { name: string; id?: string }[];
}

// Other fields of an answer are ignored: a script may say more (an address) for its own logs.
const StartAnswer = Type.Object({
  machines: Type.Array(Type.Object({ name: Type.String({ minLength: 1 }), id: Type.Optional(Type.Union([Type.String(), Type.Null()])) })),
});
const StopAnswer = Type.Object({ stopped: Type.Array(Type.String({ minLength: 1 })) });

/** At most this much of stdout is read: an answer names at most a pool's max machines. */
const MAX_STDOUT = 1024 * 1024;
/** The end of stderr an error carries: the executable's last words are its reason. */
const STDERR_TAIL = 2000;

export interface CommandProviderOptions {
  /** The executable as the cluster file names it (what messages show): absolute, or relative to `baseDir`. */
  command: string;
  /** Where a relative `command` is found, and where it runs (the cluster file's directory). */
  baseDir: string;
  /** A run longer than this is killed, its whole process group (default 300 s). */
  timeoutMs?: number;
  /** One line per request and per failure (default: stderr). */
  log?: (line: string) => void;
  /** The executable's environment (default: this process's: its cloud credentials are the operator's). */
  env?: NodeJS.ProcessEnv;
}

export class CommandProvider implements MachineProvider {
  private readonly path: string;
  private readonly timeoutMs: number;
  private readonly log: (line: string) => void;
  /** The runs in flight, each ended by close(): a script that hangs must not hold the server's shutdown for its timeout. */
  private readonly running = new Set<() => void>();
  private closed = false;

  constructor(private readonly opts: CommandProviderOptions) {
    this.path = isAbsolute(opts.command) ? opts.command : resolve(opts.baseDir, opts.command);
    this.timeoutMs = opts.timeoutMs ?? 300_000;
    this.log = opts.log ?? ((line) => process.stderr.write(`${line}\n`));
  }

  async start(req: StartRequest): Promise<StartedMachine[]> {
    if (req.names.length === 0) return [];
    const request: CommandStartRequest = {
      action: 'start',
      pool: req.pool,
      template: templateEntry(req.template),
      count: req.names.length,
      names: [...req.names],
      server: req.server,
      joinToken: req.joinToken,
      ...(req.ca !== undefined ? { ca: req.ca } : {}),
    };
    this.log(`command provider: ${this.opts.command} start ${req.names.join(', ')} (pool ${req.pool})`);
    const answer = await this.run(request, StartAnswer, req.joinToken);
    const names = this.checkNames(
      answer.machines.map((m) => m.name),
      req.names,
      'start',
      req.joinToken,
    );
    return answer.machines.map((m, i) => ({ name: names[i]!, ...(typeof m.id === 'string' ? { providerId: m.id } : {}) }));
  }

  async stop(req: { pool: string; machines: { name: string; providerId: string | null }[] }): Promise<string[]> {
    if (req.machines.length === 0) return [];
    const request: CommandStopRequest = {
      action: 'stop',
      pool: req.pool,
      machines: req.machines.map((m) => ({ name: m.name, ...(m.providerId !== null ? { id: m.providerId } : {}) })),
    };
    const asked = req.machines.map((m) => m.name);
    this.log(`command provider: ${this.opts.command} stop ${asked.join(', ')} (pool ${req.pool})`);
    const answer = await this.run(request, StopAnswer, null);
    return this.checkNames(answer.stopped, asked, 'stop');
  }

  /**
   * Ends the runs in flight (their process groups killed; each request rejects with
   * ProviderClosedError, so the loop fails no machine for it) and refuses any after: the server is
   * stopping. A start ended so is asked again, by name, by the next process.
   */
  async close(): Promise<void> {
    this.closed = true;
    for (const end of [...this.running]) end();
  }

  /** The answer's names, refused whole if one was not asked for or comes twice: the autoscaler must not adopt a machine it did not decide. */
  private checkNames(names: string[], asked: readonly string[], action: 'start' | 'stop', secret: string | null = null): string[] {
    const allowed = new Set(asked);
    // A script that echoes its input may answer the join token as a name: never quoted.
    const quoted = (n: string) => (secret ? n.split(secret).join('<join token>') : n);
    const unknown = names.filter((n) => !allowed.has(n)).map(quoted);
    if (unknown.length) throw new Error(`${this.opts.command} answered ${action} with names it was not asked to ${action}: ${unknown.join(', ')}`);
    const twice = names.filter((n, i) => names.indexOf(n) !== i);
    if (twice.length) throw new Error(`${this.opts.command} answered ${action} with ${twice[0]} more than once`);
    return names;
  }

  /**
   * One run: the request on stdin, the answer from stdout, validated. Its own process group, so a
   * timeout kills what it started too (an `aws` call waiting on the network), not just the shell.
   * `secret` (the join token) is cut from anything an error quotes: a script may echo its input.
   */
  private run<S extends TSchema>(request: CommandStartRequest | CommandStopRequest, schema: S, secret: string | null): Promise<Static<S>> {
    const name = this.opts.command;
    const scrub = (text: string): string => (secret ? text.split(secret).join('<join token>') : text);
    if (this.closed) return Promise.reject(new ProviderClosedError(`${name} ${request.action} was not run: the server is stopping`));
    return new Promise<Static<S>>((resolvePromise, reject) => {
      const child = spawn(this.path, [], { cwd: this.opts.baseDir, env: this.opts.env ?? process.env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stdoutBytes = 0;
      let stderr = '';
      let timedOut = false;
      let tooMuch = false;
      let ended = false;
      const killGroup = () => {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
        } catch {
          // The group is gone already.
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup();
      }, this.timeoutMs);
      const tail = () => {
        const t = scrub(stderr).trim();
        return t ? `: ${t.length > STDERR_TAIL ? `…${t.slice(-STDERR_TAIL)}` : t}` : ' (nothing on stderr)';
      };
      // 'error' (could not spawn) may be followed by 'close': the first word is the one that counts.
      let settled = false;
      const end = () => {
        ended = true;
        killGroup();
      };
      this.running.add(end);
      const fail = (message: string, closed = false) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.running.delete(end);
        this.log(`command provider: ${message}`);
        reject(closed ? new ProviderClosedError(message) : new Error(message));
      };
      child.stdout.setEncoding('utf8');
      child.stderr.setEncoding('utf8');
      child.stdout.on('data', (d: string) => {
        stdoutBytes += Buffer.byteLength(d);
        if (stdoutBytes > MAX_STDOUT) {
          tooMuch = true;
          killGroup();
        } else stdout += d;
      });
      child.stderr.on('data', (d: string) => {
        stderr = (stderr + d).slice(-4 * STDERR_TAIL);
      });
      // A script that exits without reading its request closes the pipe: its exit code says how it went.
      child.stdin.on('error', () => {});
      child.once('error', (err) => fail(`${name} could not be run: ${err.message}`));
      child.once('close', (code, signal) => {
        if (ended) return fail(`${name} ${request.action} was ended: the server is stopping (its process group was killed)`, true);
        if (timedOut)
          return fail(
            `${name} timed out after ${this.timeoutMs % 1000 === 0 ? `${this.timeoutMs / 1000} s` : `${this.timeoutMs} ms`} (its process group was killed)${tail()}`,
          );
        if (tooMuch) return fail(`${name} wrote more than ${MAX_STDOUT} bytes on stdout: an answer is one JSON object`);
        if (signal) return fail(`${name} was killed by ${signal}${tail()}`);
        if (code !== 0) return fail(`${name} exited ${code}${tail()}`);
        let answer: unknown;
        try {
          answer = JSON.parse(stdout);
        } catch (err) {
          const head = scrub(stdout.trim()).slice(0, 200);
          return fail(`${name} answered ${request.action} with no JSON on stdout (${(err as Error).message})${head ? `: ${head}` : ''}`);
        }
        const issues = schemaIssues(schema, answer);
        if (issues.length) {
          const what = issues.map((i) => `${i.path || '/'}: ${i.message}`).join('; ');
          return fail(`${name} answered ${request.action} with an invalid answer: ${scrub(what)}`);
        }
        settled = true;
        clearTimeout(timer);
        this.running.delete(end);
        resolvePromise(answer as Static<S>);
      });
      child.stdin.end(JSON.stringify(request) + '\n');
    });
  }
}
