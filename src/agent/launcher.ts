/**
 * Starting commands from a small, long-lived bash instead of from the agent itself.
 *
 * Why: starting a process from Node is a fork of the whole agent, whose cost grows with its
 * resident memory (100+ MB under load): measured at 2.2 ms of the agent's CPU per attempt, nearly
 * half of all it did, on its one event loop. A fork of a 4 MB bash costs a fraction of that, and
 * outside the agent's loop. The agent writes one line of shell per attempt into the launcher's
 * stdin; bash starts the attempt as a background job (with `set -m`, each job leads a process group
 * of its own, as `detached` does for a spawn) and answers with its pid; the job itself, a subshell,
 * runs the command in its attempt directory with its environment and output files, writes the exit
 * status into the `status` file and then a line `end <id> <status>` into the pipe back to the
 * agent. So the subshell is the attempt's shim (process-runner.ts has the same one for a direct
 * spawn): a restarted agent re-attaches to it the same way.
 *
 * The agent is not the parent of the job, so it cannot wait for it: it learns the end from that
 * line, and, should the line never come (the subshell killed from outside), from a poll of the
 * leader's liveness every second. Anything the launcher cannot take (no bash on the machine, an
 * environment variable whose name is no shell identifier, the launcher dead) goes through a direct
 * spawn instead: same files, same shim, same outcome.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { groupsOfAttempt } from './agent-state.js';
import { killProcessGroup, signalProcessGroup } from './process-group.js';
import { EXIT_UNKNOWN, fromStatus, leaderRunning, notStarted, readExitStatus, resolveArgv, type ProcessHandle, type ProcessResult, type RunProcessOptions } from './process-runner.js';

const BASH = '/bin/bash';
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** How often the leaders of running jobs are checked, for an end that sent no line. */
const POLL_MS = 1000;

interface Job {
  id: string;
  attemptId: string;
  pid: number | null;
  statusFile: string;
  killGraceMs: number;
  resolveStarted: (pid: number | null) => void;
  settle: (r: ProcessResult) => void;
  /** The leader was seen gone once with no end line: the next poll settles it from the status file. */
  goneOnce: boolean;
  killReason: string | null;
  killing: Promise<'SIGTERM' | 'SIGKILL' | null> | null;
  ended: boolean;
}

export class Launcher {
  private proc: ChildProcess | null = null;
  private buffer = '';
  private readonly jobs = new Map<string, Job>();
  private poll: NodeJS.Timeout | null = null;
  private seq = 0;
  private closed = false;

  /**
   * @param env the environment every attempt starts from (the agent's, without its own GANTRY_*
   *   variables); each attempt's own variables are exported on top of it.
   */
  constructor(
    private readonly env: Readonly<Record<string, string>>,
    private readonly log: (line: string) => void,
  ) {}

  /** Null when bash is not available or a variable cannot be exported: the caller spawns directly. */
  run(opts: RunProcessOptions & { attemptId: string }): ProcessHandle | null {
    if (this.closed) return null;
    const exports: string[] = [];
    for (const [k, v] of Object.entries(opts.env)) {
      if (this.env[k] === v) continue;
      if (!IDENTIFIER.test(k)) return null;
      exports.push(`export ${k}=${q(v)}`);
    }
    for (const k of Object.keys(this.env)) if (!(k in opts.env)) exports.push(`unset ${k}`);
    const proc = this.process();
    if (!proc) return null;
    let argv: string[];
    try {
      argv = resolveArgv(opts);
    } catch (err) {
      return notStarted(err);
    }
    const id = String(++this.seq);
    let resolveStarted!: (pid: number | null) => void;
    const started = new Promise<number | null>((r) => (resolveStarted = r));
    let settle!: (r: ProcessResult) => void;
    const done = new Promise<ProcessResult>((r) => (settle = r));
    const job: Job = { id, attemptId: opts.attemptId, pid: null, statusFile: opts.statusFile, killGraceMs: opts.killGraceMs, resolveStarted, settle, goneOnce: false, killReason: null, killing: null, ended: false };
    this.jobs.set(id, job);
    // The subshell: the attempt's shim. Its traps run only once the command has ended (bash defers
    // them while it waits for a foreground command), so a TERM to the group reaches the command and
    // the status is still written; fd 3, the pipe back to the agent, is not the command's.
    const command = argv.map(q).join(' ');
    const line =
      `( cd ${q(opts.cwd)} || exit 126; ${exports.join('; ')}${exports.length ? '; ' : ''}trap : HUP INT TERM; ${command} 3>&-; ` +
      `c=$?; echo "$c" > ${q(opts.statusFile)}; printf 'end %s %s\\n' ${id} "$c" >&3 ) </dev/null >>${q(opts.stdoutFile)} 2>>${q(opts.stderrFile)} &\n` +
      `printf 'pid %s %s\\n' ${id} "$!"; disown $!\n`;
    proc.stdin!.write(line);

    let timer: NodeJS.Timeout | undefined;
    const timeoutS = opts.timeoutSeconds ?? 0;
    if (timeoutS > 0) timer = setTimeout(() => void this.kill(job, `timeout after ${timeoutS} s`), timeoutS * 1000);
    void done.then(() => clearTimeout(timer));
    const handle: ProcessHandle = {
      get pid() {
        return job.pid;
      },
      started,
      done,
      kill: (why) => this.kill(job, `killed: ${why}`),
      leave: () => {
        clearTimeout(timer);
        this.jobs.delete(id);
      },
    };
    return handle;
  }

  /** Stops the launcher; jobs already started run on (the agent stopped and leaves them). */
  close(): void {
    this.closed = true;
    if (this.poll) clearInterval(this.poll);
    this.proc?.stdin?.end();
    this.proc?.unref();
    (this.proc?.stdout as { unref?: () => void } | null)?.unref?.();
  }

  private process(): ChildProcess | null {
    if (this.proc) return this.proc;
    let proc: ChildProcess;
    try {
      // Its own process group: a Ctrl-C at the terminal is for the agent, which stops the jobs itself.
      proc = spawn(BASH, ['--norc', '--noprofile', '-s'], { env: this.env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    } catch {
      this.closed = true;
      return null;
    }
    this.proc = proc;
    proc.on('error', (err) => {
      this.log(`launcher: ${err.message}; starting attempts directly`);
      this.closed = true;
      this.lost();
    });
    proc.on('exit', (code, signal) => {
      if (!this.closed) this.log(`launcher exited (${signal ?? `code ${code}`}); starting it again for the next attempt`);
      this.proc = null;
      this.lost();
    });
    proc.stdin!.on('error', () => {});
    proc.stderr!.setEncoding('utf8');
    proc.stderr!.on('data', (d: string) => this.log(`launcher: ${d.trimEnd()}`));
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (d: string) => this.read(d));
    proc.stdin!.write('set -m; exec 3>&1\n');
    this.poll ??= setInterval(() => this.check(), POLL_MS);
    this.poll.unref();
    return proc;
  }

  private read(data: string): void {
    this.buffer += data;
    for (let i = this.buffer.indexOf('\n'); i >= 0; i = this.buffer.indexOf('\n')) {
      const [kind, id, value] = this.buffer.slice(0, i).split(' ');
      this.buffer = this.buffer.slice(i + 1);
      const job = this.jobs.get(id ?? '');
      if (!job) continue;
      if (kind === 'pid') {
        job.pid = Number(value);
        job.resolveStarted(job.pid);
      } else if (kind === 'end') {
        void this.end(job, Number(value));
      }
    }
  }

  /** The job's line came: whatever it left in its group goes with it, as for a spawned process. */
  private async end(job: Job, status: number | null): Promise<void> {
    if (job.ended) return;
    job.ended = true;
    // The job's end line and bash's pid line come from two processes: the end can come first.
    const pid = job.pid ?? (await this.startedPid(job));
    this.jobs.delete(job.id);
    let escalated: 'SIGTERM' | 'SIGKILL' | null = null;
    if (job.killing) escalated = await job.killing;
    else if (pid !== null && !(await groupGoneSoon(pid))) await killProcessGroup(pid, job.killGraceMs);
    const how = status !== null ? fromStatus(status) : readExitStatus(job.statusFile);
    if (how) return job.settle({ ...how, reason: job.killReason });
    // No status: the shim died before writing one. Killed by us, the last signal sent is how it
    // ended; otherwise it was killed from outside, and how the command ended cannot be known.
    if (job.killReason) return job.settle({ exitCode: null, signal: escalated ?? 'SIGKILL', reason: job.killReason });
    job.settle({ exitCode: null, signal: null, reason: EXIT_UNKNOWN });
  }

  private async kill(job: Job, reason: string): Promise<void> {
    if (job.ended) return;
    job.killReason ??= reason;
    const pid = job.pid ?? (await this.startedPid(job));
    if (pid === null || job.ended) return;
    job.killing ??= killProcessGroup(pid, job.killGraceMs);
    await job.killing;
    // The end line may have been written just before the group went; give it a moment, then settle without it.
    await new Promise((r) => setTimeout(r, 50));
    await this.end(job, null);
  }

  private startedPid(job: Job): Promise<number | null> {
    return new Promise((resolve) => {
      const prev = job.resolveStarted;
      job.resolveStarted = (pid) => {
        prev(pid);
        resolve(pid);
      };
    });
  }

  /** An end that sent no line (the subshell killed from outside): seen gone twice, it is settled from what is on disk. */
  private check(): void {
    for (const job of this.jobs.values()) {
      if (job.pid === null || job.ended) continue;
      if (leaderRunning(job.pid)) continue;
      if (job.goneOnce) void this.end(job, null);
      else job.goneOnce = true;
    }
  }

  /**
   * The launcher died. Jobs it started are still followed: their end lines come through the pipe,
   * which they hold open, and the poll catches the rest. A job whose pid never came may have
   * started all the same: it is looked for by its attempt id.
   */
  private lost(): void {
    for (const job of this.jobs.values()) {
      if (job.pid !== null) continue;
      if (job.ended) {
        job.resolveStarted(null);
        continue;
      }
      const found = groupsOfAttempt(job.attemptId);
      if (found.length === 1) {
        job.pid = found[0]!;
        job.resolveStarted(job.pid);
        continue;
      }
      this.jobs.delete(job.id);
      job.ended = true;
      job.resolveStarted(null);
      job.settle({ exitCode: null, signal: null, reason: 'spawn failed: the launcher exited before starting it' });
    }
  }
}

/**
 * Whether the group is gone within a few milliseconds: the subshell writes its end line as it
 * exits, and bash reaps it at once. A group that stays longer holds what the command left behind
 * (or a zombie bash has not reaped yet), which the caller's kill sweeps. One signal-0 per check,
 * not the scan of /proc that telling zombies apart needs.
 */
async function groupGoneSoon(pgid: number): Promise<boolean> {
  for (let i = 0; i < 10; i++) {
    if (!signalProcessGroup(pgid, 0)) return true;
    await new Promise((r) => setTimeout(r, 2));
  }
  return false;
}

/** One shell word: single-quoted, with each ' written as '\''. */
function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
