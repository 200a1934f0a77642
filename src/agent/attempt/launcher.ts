/**
 * Starting commands from a small, long-lived program instead of from the agent itself.
 *
 * Why: starting a process from Node is a fork of the whole agent, whose cost grows with its
 * resident memory (100+ MB under load): measured at 2.2 ms of the agent's CPU per attempt, nearly
 * half of all it did, on its one event loop. The agent instead writes each attempt to a launcher
 * (launcher-programs.ts: a compiled C one where it was built, Python where python3 is, else a bash), which starts the
 * command in a process group of its own and answers with its pid; when the command ends, the
 * launcher writes its exit status into the attempt's `status` file and then a line `end <id>
 * <status>` back to the agent. Either way the status is written by something that outlives the
 * agent, so a restarted agent re-attaches to the command by its pid and reads how it ended from the
 * file (process-runner.ts, attachProcess).
 *
 * The agent is not the parent of the command, so it cannot wait for it: it learns the end from the
 * launcher's line and, should that never come (the launcher or the shim killed from outside), from
 * a poll of the leader's liveness every second. A launcher that exits before it said `ready` never
 * read a job: its jobs go to the next program, or, with none left, are left to the caller. Anything
 * no launcher can take (a variable bash cannot export, every launcher gone) the caller spawns
 * directly: same files, same status, same outcome.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { groupsOfAttempt } from '../disk/agent-state.js';
import type { LauncherJob, LauncherProgram } from './launcher-programs.js';
import { killProcessGroup, signalProcessGroup } from './process-group.js';
import type { AttemptCgroup } from '../contain/attempt-cgroup.js';
import { emptyCgroup, stopCgroup } from '../contain/cgroup-kill.js';
import {
  ended,
  EXIT_UNKNOWN,
  fromStatus,
  leaderRunning,
  notStarted,
  readExitStatus,
  resolveArgv,
  runProcess,
  type ProcessHandle,
  type KillCause,
  type ProcessResult,
  type RunProcessOptions,
  type SpawnCause,
  spawnFailed,
} from './process-runner.js';
import { errorText } from '../../lib/error-text.js';
import { sleep } from '../../lib/sleep.js';

/** How often the leaders of running jobs are checked, for an end that sent no line. */
const POLL_MS = 1000;

interface Job {
  id: string;
  attemptId: string;
  /** What the launcher is sent; kept until the pid comes, for a launcher that never started. */
  spec: LauncherJob;
  pid: number | null;
  statusFile: string;
  killGraceMs: number;
  resolveStarted: (pid: number | null) => void;
  settle: (r: ProcessResult) => void;
  /** The leader was seen gone once with no end line: the next poll settles it from the status file. */
  goneOnce: boolean;
  killReason: KillCause | null;
  killing: Promise<'SIGTERM' | 'SIGKILL' | null> | null;
  ended: boolean;
  /** Spawned by the agent itself after the launcher failed to start (spawnDirectly). */
  direct?: ProcessHandle;
  /** The attempt's cgroups: its kill and its end go by them rather than by its process group (cgroup-kill.ts). */
  cgroup: AttemptCgroup | null;
}

export class Launcher {
  private proc: ChildProcess | null = null;
  /** The program `proc` runs: programs[current]. */
  private current = 0;
  /** `proc` said `ready`: it reads what it is sent. */
  private ready = false;
  private buffer = '';
  private readonly jobs = new Map<string, Job>();
  private poll: NodeJS.Timeout | null = null;
  private seq = 0;
  private closed = false;

  /**
   * @param env the environment every attempt starts from (the agent's, without its own GANTRY_*
   *   variables); each attempt's own variables are set on top of it.
   * @param programs the launchers to try, in order (launcherPrograms); empty: none, every
   *   attempt is left to the caller.
   */
  constructor(
    private readonly env: Readonly<Record<string, string>>,
    private readonly log: (line: string) => void,
    private readonly programs: readonly LauncherProgram[],
  ) {
    if (programs.length === 0) this.closed = true;
  }

  /** Its commands sent and not yet started (no pid, no failure yet): how busy it is (launcher-pool.ts). */
  get starting(): number {
    let n = 0;
    for (const job of this.jobs.values()) if (job.pid === null && !job.ended && !job.direct) n++;
    return n;
  }

  /** The program that starts commands now, or null when the caller spawns them. */
  get program(): LauncherProgram['name'] | null {
    return this.closed ? null : (this.programs[this.current]?.name ?? null);
  }

  /**
   * Null when no launcher can take it: the caller spawns directly. The command's environment is
   * the launcher's (the inherited one) with `envChanges` on top.
   */
  run(opts: Omit<RunProcessOptions, 'env'> & { attemptId: string; envChanges: Readonly<Record<string, string>>; prepared?: string }): ProcessHandle | null {
    if (this.closed) return null;
    const set: Record<string, string> = {};
    for (const k in opts.envChanges) if (this.env[k] !== opts.envChanges[k]) set[k] = opts.envChanges[k]!;
    let argv: string[];
    try {
      argv = resolveArgv({ command: opts.command, cwd: opts.cwd, env: { PATH: set.PATH ?? this.env.PATH ?? '' } }, opts.contain?.user ?? null);
    } catch (err) {
      return notStarted(err);
    }
    const id = String(++this.seq);
    const spec: LauncherJob = {
      id,
      argv,
      cwd: opts.cwd,
      set,
      stdoutFile: opts.stdoutFile,
      stderrFile: opts.stderrFile,
      statusFile: opts.statusFile,
      ...(opts.contain ? { contain: opts.contain } : {}),
      ...(opts.prepared !== undefined ? { prepared: opts.prepared } : {}),
    };
    const line = this.programs[this.current]!.encode(spec);
    if (line === null) return null;
    const proc = this.process();
    if (!proc) return null;
    let resolveStarted!: (pid: number | null) => void;
    const started = new Promise<number | null>((r) => (resolveStarted = r));
    let settle!: (r: ProcessResult) => void;
    const done = new Promise<ProcessResult>((r) => (settle = r));
    const job: Job = {
      id,
      attemptId: opts.attemptId,
      spec,
      pid: null,
      statusFile: opts.statusFile,
      killGraceMs: opts.killGraceMs,
      resolveStarted,
      settle,
      goneOnce: false,
      killReason: null,
      killing: null,
      ended: false,
      cgroup: opts.cgroup ?? null,
    };
    this.jobs.set(id, job);
    proc.stdin!.write(line);

    let timer: NodeJS.Timeout | undefined;
    const timeoutS = opts.timeoutSeconds ?? 0;
    if (timeoutS > 0) timer = setTimeout(() => void this.kill(job, { kind: 'timeout', text: `timeout after ${timeoutS} s` }), timeoutS * 1000);
    void done.then(() => clearTimeout(timer));
    const handle: ProcessHandle = {
      get pid() {
        return job.pid;
      },
      started,
      done,
      kill: (why, graceMs) => this.kill(job, { kind: 'killed', text: `killed: ${why}` }, graceMs),
      leave: () => {
        clearTimeout(timer);
        job.direct?.leave();
        this.jobs.delete(id);
      },
    };
    return handle;
  }

  /**
   * Asks the launcher for a child forked into `procsFiles` and joined to them ahead of its job
   * (launcher.c, `prepare`), named `token`; false when its program has none (Python, bash) or it
   * is closed. Not waited for: the launcher answers `prepared <token> <pid>` and goes on.
   */
  prepare(token: string, procsFiles: readonly string[]): boolean {
    const program = this.programs[this.current];
    if (this.closed || !program?.prepare) return false;
    const proc = this.process();
    if (!proc) return false;
    proc.stdin!.write(program.prepare(token, procsFiles));
    return true;
  }

  /** Stops the launcher; jobs already started run on (the agent stopped and leaves them). */
  close(): void {
    this.closed = true;
    if (this.poll) clearInterval(this.poll);
    this.proc?.stdin?.end();
    // The C and Python launchers stay until the commands they started have ended: nothing of them may keep
    // the agent's process alive meanwhile.
    this.proc?.unref();
    for (const pipe of [this.proc?.stdout, this.proc?.stderr]) (pipe as { unref?: () => void } | null | undefined)?.unref?.();
  }

  private process(): ChildProcess | null {
    if (this.proc) return this.proc;
    const program = this.programs[this.current]!;
    let proc: ChildProcess;
    try {
      // Its own process group: a Ctrl-C at the terminal is for the agent, which stops the jobs itself.
      proc = spawn(program.argv[0]!, program.argv.slice(1), { env: this.env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    } catch (err) {
      this.log(`launcher (${program.name}) cannot be started: ${errorText(err)}`);
      this.advance();
      return null;
    }
    this.proc = proc;
    this.ready = false;
    let over = false;
    const gone = (how: string) => {
      if (over || this.proc !== proc) return;
      over = true;
      this.proc = null;
      this.buffer = '';
      if (!this.ready) {
        this.log(`launcher (${program.name}) did not start (${how})`);
        this.advance();
        this.rehome();
        return;
      }
      if (!this.closed) this.log(`launcher (${program.name}) exited (${how}); starting it again for the next attempt`);
      this.lost();
    };
    proc.on('error', (err) => gone(err.message));
    proc.on('exit', (code, signal) => gone(signal ?? `code ${code}`));
    proc.stdin!.on('error', () => {});
    proc.stderr!.setEncoding('utf8');
    proc.stderr!.on('data', (d: string) => this.log(`launcher (${program.name}): ${d.trimEnd()}`));
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (d: string) => this.read(d));
    if (program.preamble) proc.stdin!.write(program.preamble);
    this.poll ??= setInterval(() => this.check(), POLL_MS);
    this.poll.unref();
    return proc;
  }

  /** On to the next program; with none left, the launcher closes and the caller spawns every command. */
  private advance(): void {
    this.current++;
    if (this.current >= this.programs.length) this.closed = true;
    else this.log(`starting attempts with the ${this.programs[this.current]!.name} launcher instead`);
  }

  /**
   * A launcher that did not start read none of the jobs sent to it: each goes to the next
   * program, or is spawned here directly, as the caller would have.
   */
  private rehome(): void {
    for (const job of [...this.jobs.values()]) {
      if (job.pid !== null || job.ended || job.direct) continue;
      const line = this.closed ? null : this.programs[this.current]!.encode(job.spec);
      const proc = line === null ? null : this.process();
      if (proc && line !== null) proc.stdin!.write(line);
      else this.spawnDirectly(job);
    }
  }

  /** The job spawned by the agent after all (runProcess), its answers passed on as a launcher's would be. */
  private spawnDirectly(job: Job): void {
    const { spec } = job;
    // The timeout stays the launcher's (run set it), and so do kills: only the spawn changes.
    const env = { ...this.env, ...spec.set };
    const h = runProcess({
      command: spec.argv,
      cwd: spec.cwd,
      env,
      stdoutFile: spec.stdoutFile,
      stderrFile: spec.stderrFile,
      statusFile: spec.statusFile,
      killGraceMs: job.killGraceMs,
      timeoutSeconds: null,
      ...(spec.contain ? { contain: spec.contain } : {}),
      cgroup: job.cgroup,
    });
    job.direct = h;
    job.pid = h.pid;
    job.resolveStarted(h.pid);
    void h.done.then(async (r) => {
      if (job.ended) return;
      job.ended = true;
      this.jobs.delete(job.id);
      const escalated = job.killing ? await job.killing : null;
      // Killed by the launcher's kill (a cancel, the timeout): that is the reason, as for any job.
      if (job.killReason && r.kind !== 'spawn-failed') return job.settle(ended({ exitCode: r.exitCode, signal: r.signal ?? escalated }, job.killReason));
      job.settle(r);
    });
  }

  private notStarted(job: Job, why: string, cause?: SpawnCause): void {
    this.jobs.delete(job.id);
    job.ended = true;
    job.resolveStarted(null);
    job.settle(spawnFailed(why, cause));
  }

  private read(data: string): void {
    this.buffer += data;
    for (let i = this.buffer.indexOf('\n'); i >= 0; i = this.buffer.indexOf('\n')) {
      const line = this.buffer.slice(0, i);
      this.buffer = this.buffer.slice(i + 1);
      const [kind, id, value] = line.split(' ');
      if (kind === 'ready') {
        this.ready = true;
        continue;
      }
      const job = this.jobs.get(id ?? '');
      if (!job) continue;
      if (kind === 'pid') {
        job.pid = Number(value);
        job.resolveStarted(job.pid);
      } else if (kind === 'end') {
        void this.end(job, Number(value));
      } else if (kind === 'fail') {
        this.notStarted(job, line.slice(`fail ${id} `.length));
      } else if (kind === 'gone') {
        this.notStarted(job, line.slice(`gone ${id} `.length), 'cgroup-gone');
      }
    }
  }

  /** The job's line came: whatever it left in its group goes with it, as for a spawned process. */
  private async end(job: Job, status: number | null): Promise<void> {
    if (job.ended) return;
    job.ended = true;
    // With bash, the job's end line and bash's pid line come from two processes: the end can come first.
    const pid = job.pid ?? (await this.startedPid(job));
    this.jobs.delete(job.id);
    let escalated: 'SIGTERM' | 'SIGKILL' | null = null;
    if (job.killing) escalated = await job.killing;
    else if (!job.cgroup && pid !== null && !(await groupGoneSoon(pid))) await killProcessGroup(pid, job.killGraceMs);
    // Over when its cgroup is empty: what the command left (in any group or session) goes at once.
    if (job.cgroup) await emptyCgroup(job.cgroup);
    const how = status !== null ? fromStatus(status) : readExitStatus(job.statusFile);
    if (how) return job.settle(ended(how, job.killReason));
    // No status: the launcher (or the shim) died before writing one. Killed by us, the last signal
    // sent is how it ended; otherwise how the command ended cannot be known.
    if (job.killReason) return job.settle(ended({ exitCode: null, signal: escalated ?? 'SIGKILL' }, job.killReason));
    job.settle({ kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN });
  }

  private async kill(job: Job, reason: KillCause, graceMs = job.killGraceMs): Promise<void> {
    if (job.ended) return;
    job.killReason ??= reason;
    const pid = job.pid ?? (await this.startedPid(job));
    if (pid === null || job.ended) return;
    job.killing ??= job.cgroup ? stopCgroup(job.cgroup, graceMs) : killProcessGroup(pid, graceMs);
    await job.killing;
    if (job.direct) return void (await job.direct.done);
    // The end line may have been written just before the group went; give it a moment, then settle without it.
    await sleep(50);
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

  /** An end that sent no line (the launcher or shim killed from outside): seen gone twice, it is settled from what is on disk. */
  private check(): void {
    for (const job of this.jobs.values()) {
      if (job.pid === null || job.ended || job.direct) continue;
      if (leaderRunning(job.pid)) continue;
      if (job.goneOnce) void this.end(job, null);
      else job.goneOnce = true;
    }
  }

  /**
   * The launcher died after it started. Jobs it started are still followed: with bash their end
   * lines come through the pipe, which the shims hold open, and the poll catches the rest. A job
   * whose pid never came may have started all the same: it is looked for by its attempt id.
   */
  private lost(): void {
    for (const job of this.jobs.values()) {
      if (job.pid !== null || job.direct) continue;
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
      this.notStarted(job, 'the launcher exited before starting it');
    }
  }
}

/**
 * Whether the group is gone within a few milliseconds: the command (or its shim) has just ended,
 * and is reaped at once. A group that stays longer holds what the command left behind (or a
 * zombie not reaped yet), which the caller's kill sweeps. One signal-0 per check, not the scan of
 * /proc that telling zombies apart needs.
 */
async function groupGoneSoon(pgid: number): Promise<boolean> {
  for (let i = 0; i < 10; i++) {
    if (!signalProcessGroup(pgid, 0)) return true;
    await sleep(2);
  }
  return false;
}
