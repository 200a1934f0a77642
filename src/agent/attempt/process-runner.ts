/**
 * Runs one attempt's command: no shell interprets it (the argv is the user's, already split), in
 * a new process group so the whole tree can be killed, with stdout and stderr each written by the
 * process itself straight into its own file (opened for appending and handed over as the child's
 * fds 1 and 2). No pipe passes through the agent: its event loop does nothing while the command
 * prints, output written before a crash of the agent is still on disk, and the file is the source
 * the log is shipped from (log-tail.ts), at byte offsets that survive a restart of either side.
 *
 * The command runs under a small `sh` that leads the group, waits for it and writes its exit status
 * into the attempt's `status` file (the "shim", as containerd and Nomad's executor have one): an
 * agent that restarts while the command runs is no longer its parent and could not learn how it
 * ended, so it re-attaches by the pid (see `attachProcess`) and reads the status from the file. The
 * shim passes the argv through untouched ("$@"), leaves the command the default signal dispositions
 * (a trap with a handler, unlike an ignored signal, is not inherited across exec), and ends the way
 * the command did (a status above 128 is re-raised as that signal), so the agent that is its parent
 * sees what it would have seen without it. It costs about 0.1 to 0.2 ms of CPU per attempt.
 */
import { containedArgv } from '../contain/contained-argv.js';
import { executableBy, type UnixUser } from '../contain/executable-by.js';
import type { LaunchContainment } from '../contain/launch-containment.js';
import type { AttemptCgroup } from '../contain/attempt-cgroup.js';
import { emptyCgroup, stopCgroup } from '../contain/cgroup-kill.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants, openSync, readFileSync, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import type { AttemptEndKind } from '../../api/contract/attempt-end.js';
import { killProcessGroup, processGroupAlive } from './process-group.js';
import { errorText } from '../../lib/error-text.js';

/**
 * How a process ended, as a kind the agent decides on (attempt-end.ts's kinds a process can have),
 * or `unknown`: an attached process whose shim was killed too, so that nobody can say (the agent
 * reports nothing then, and the server reaps the attempt as lost).
 */
export type ProcessEndKind = Extract<AttemptEndKind, 'exited' | 'signaled' | 'timeout' | 'spawn-failed' | 'killed'> | 'unknown';

export interface ProcessResult {
  /** What decisions are taken on; `reason` is only for people. */
  kind: ProcessEndKind;
  exitCode: number | null;
  /** The signal that ended the process, e.g. "SIGKILL". */
  signal: string | null;
  /** Null for a plain exit; "killed: <why>", "timeout after N s" or "spawn failed: <message>" otherwise. */
  reason: string | null;
  /**
   * With `spawn-failed`, where the start itself can say why in a way a decision may be taken on:
   * `cgroup-gone`, a cgroup the command was to join was removed before it joined (ENOENT on its
   * `cgroup.procs`: launcher.py), which a start in a new cgroup cures (launch-attempt.ts).
   */
  spawnCause?: SpawnCause;
}

/** Why a start failed, where that is known and acted on (ProcessResult.spawnCause). */
export type SpawnCause = 'cgroup-gone';

/** Why the agent itself ended a process (the first one wins: a timeout during a cancel's grace stays a cancel). */
export interface KillCause {
  kind: 'killed' | 'timeout';
  text: string;
}

/** The kind of an end the process reached on its own, or the kill's when the agent ended it. */
function endKind(how: Pick<ProcessResult, 'exitCode' | 'signal'>, cause: KillCause | null): ProcessEndKind {
  if (cause) return cause.kind;
  return how.exitCode !== null ? 'exited' : 'signaled';
}

/** The result of a process ended by `how` (its exit status), the agent's kill `cause` if any. */
export function ended(how: Pick<ProcessResult, 'exitCode' | 'signal'>, cause: KillCause | null): ProcessResult {
  return { kind: endKind(how, cause), exitCode: how.exitCode, signal: how.signal, reason: cause?.text ?? null };
}

/** The result of a command that could not be started. */
export function spawnFailed(why: string, cause?: SpawnCause): ProcessResult {
  return { kind: 'spawn-failed', exitCode: null, signal: null, reason: `spawn failed: ${why}`, ...(cause ? { spawnCause: cause } : {}) };
}

export interface RunProcessOptions {
  command: string[];
  cwd: string;
  env: Record<string, string>;
  /** Appended to, never truncated (a retried attempt directory keeps what came before); created if absent. */
  stdoutFile: string;
  stderrFile: string;
  /** Where the shim writes the command's exit status when it ends (read by an agent that re-attached). */
  statusFile: string;
  timeoutSeconds?: number | null;
  /** Time between TERM and KILL. */
  killGraceMs: number;
  /** Cgroups, user and sandbox to start the command in (docs/containment.md); absent: none. */
  contain?: LaunchContainment;
  /**
   * The attempt's cgroups (the same as `contain.procsFiles`'): the kill and the end go by them, not
   * by the process group (cgroup-kill.ts), and `done` settles once they are empty. Absent: the group.
   */
  cgroup?: AttemptCgroup | null;
}

export interface ProcessHandle {
  /** Also the process group id; null when the spawn failed, or before it is known (see `started`). */
  readonly pid: number | null;
  /** The pid once the process runs (at once for a spawn; after a round trip through the launcher); null when it never started. */
  readonly started: Promise<number | null>;
  /** Settles once the process exited and its group is gone. Never rejects. */
  readonly done: Promise<ProcessResult>;
  /** TERM the group, KILL it after the grace (`graceMs`, else the agent's); resolves once `done` has. Harmless after exit. */
  kill(why: string, graceMs?: number): Promise<void>;
  /** The agent is stopping and leaves the process running: it no longer keeps the agent alive. */
  leave(): void;
}

export function runProcess(opts: RunProcessOptions): ProcessHandle {
  let resolveDone!: (r: ProcessResult) => void;
  const done = new Promise<ProcessResult>((resolve) => (resolveDone = resolve));
  let settled = false;
  const settle = (r: ProcessResult) => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    resolveDone(r);
  };
  let timer: NodeJS.Timeout | undefined;

  let child: ChildProcess;
  const fds: number[] = [];
  try {
    const argv = containedArgv(resolveArgv(opts, opts.contain?.user ?? null), opts.contain);
    // 0600 whatever the umask: what a stage prints (a secret it echoes) is the agent's to ship.
    fds.push(openSync(opts.stdoutFile, 'a', 0o600), openSync(opts.stderrFile, 'a', 0o600));
    child = spawn(SHELL, ['-c', SHIM, 'gantry-attempt', opts.statusFile, ...argv], {
      detached: true,
      cwd: opts.cwd,
      env: opts.env,
      stdio: ['ignore', fds[0], fds[1]],
    });
  } catch (err) {
    return notStarted(err);
  } finally {
    // The child has its own copies (or never started); the agent writes nothing there.
    for (const fd of fds) closeSync(fd);
  }
  const pid = child.pid ?? null;

  // The first reason wins: a timeout that fires while a cancel's grace runs stays a cancel.
  let killReason: KillCause | null = null;
  let killing: Promise<void> | null = null;
  let exited = false;
  const cgroup = opts.cgroup ?? null;
  const killGroup = (reason: KillCause, graceMs = opts.killGraceMs): Promise<void> => {
    if (pid === null || exited) return done.then(() => undefined);
    killReason ??= reason;
    killing ??= (cgroup ? stopCgroup(cgroup, graceMs) : killProcessGroup(pid, graceMs)).then(() => undefined);
    return killing.then(() => done).then(() => undefined);
  };

  child.once('error', (err) => {
    // Before an exit, an error can only mean the process never started (ENOENT, EACCES, bad cwd).
    if (exited) return;
    settle(spawnFailed(err.message));
  });

  child.once('exit', (code, signal) => {
    exited = true;
    clearTimeout(timer);
    // Descendants still alive when the leader exits belong to the attempt and go with it.
    // Settle only once the group (the cgroup, where there is one) is gone, so a finished attempt
    // never leaves a process behind (nor a writer that could still add to its log after the log
    // was shipped).
    const sweep = cgroup
      ? (killing ?? Promise.resolve()).then(() => emptyCgroup(cgroup))
      : pid !== null
        ? (killing ?? killProcessGroup(pid, opts.killGraceMs))
        : Promise.resolve();
    void sweep.then(() => settle(ended({ exitCode: code, signal }, killReason)));
  });

  const timeoutS = opts.timeoutSeconds ?? 0;
  if (pid !== null && timeoutS > 0) {
    timer = setTimeout(() => void killGroup({ kind: 'timeout', text: `timeout after ${timeoutS} s` }), timeoutS * 1000);
  }

  return {
    pid,
    started: Promise.resolve(pid),
    done,
    kill: (why: string, graceMs?: number) => killGroup({ kind: 'killed', text: `killed: ${why}` }, graceMs),
    leave: () => {
      clearTimeout(timer);
      child.unref();
    },
  };
}

const SHELL = '/bin/sh';

/**
 * The shim (see the top of this file). `$1` is the status file, the rest the command. The traps run
 * only after the command has ended (a shell waiting for a foreground command defers them), so a
 * TERM to the group reaches the command and the shim still records how it ended.
 */
const SHIM = [
  's=$1; shift',
  'trap : HUP INT TERM',
  // The command's umask is a login's; the shim's own file (the status) is private (0600).
  'umask 022',
  '"$@"',
  'c=$?',
  'umask 077',
  'echo "$c" > "$s"',
  'if [ "$c" -gt 128 ] && [ "$c" -lt 160 ]; then trap - HUP INT TERM; kill -s "$(kill -l "$c")" "$$" 2>/dev/null; fi',
  'exit "$c"',
].join('\n');

/** The command with its file resolved (resolveCommand); throws when it cannot start. */
export function resolveArgv(opts: Pick<RunProcessOptions, 'command' | 'env' | 'cwd'>, user: UnixUser | null = null): string[] {
  const [file, ...args] = opts.command;
  if (file === undefined || file === '') throw new Error('command is empty');
  return [resolveCommand(file, opts.env.PATH ?? '', opts.cwd, user), ...args];
}

/** The handle of a command that never started: its outcome says why. */
export function notStarted(err: unknown): ProcessHandle {
  const done = Promise.resolve(spawnFailed(errorText(err)));
  return { pid: null, started: Promise.resolve(null), done, kill: async () => {}, leave: () => {} };
}

/**
 * The command's file, found as execvp would (a name with a slash is a path, relative to the
 * working directory; otherwise each PATH entry in turn), so that a command that cannot start is
 * told apart from one that ran and exited 127.
 */
function resolveCommand(file: string, pathVar: string, cwd: string, user: UnixUser | null): string {
  // The same few commands, thousands of times: a name found before is checked with one call, not
  // one per PATH entry (measured at 4 % of the agent's time with a long PATH). Only where the
  // answer cannot depend on the working directory.
  const cacheable = !file.includes('/') && pathVar.split(delimiter).every((d) => isAbsolute(d));
  const key = `${user ? `${user.uid}:${user.gid}` : ''}\0${pathVar}\0${file}`;
  const known = cacheable ? resolved.get(key) : undefined;
  if (known !== undefined) {
    if (canExecute(known, user)) return known;
    resolved.delete(key);
  }
  const found = search(file, pathVar, cwd, user);
  if (cacheable) {
    if (resolved.size >= 256) resolved.clear();
    resolved.set(key, found);
  }
  return found;
}

const resolved = new Map<string, string>();

/** Root's access(2) passes nearly everything: for an attempt's user, its own permissions (executable-by.ts). */
function canExecute(path: string, user: UnixUser | null): boolean {
  if (user) return executableBy(path, user);
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function search(file: string, pathVar: string, cwd: string, user: UnixUser | null): string {
  const candidates = file.includes('/')
    ? [isAbsolute(file) ? file : resolve(cwd, file)]
    : pathVar.split(delimiter).map((d) => join(d === '' ? cwd : resolve(cwd, d), file));
  let denied: string | null = null;
  for (const c of candidates) {
    try {
      if (!statSync(c).isFile()) continue;
    } catch {
      continue;
    }
    if (canExecute(c, user)) return c;
    denied ??= c;
  }
  if (denied) throw new Error(`EACCES: ${denied} is not executable${user ? ` by uid ${user.uid}` : ''}`);
  throw new Error(file.includes('/') ? `ENOENT: ${file} does not exist` : `ENOENT: ${file} is not in PATH (${pathVar || 'empty'})`);
}

/** How the command ended, from the status the shim wrote; null when there is none (the shim was killed, or never got there). */
export function readExitStatus(statusFile: string): Pick<ProcessResult, 'exitCode' | 'signal'> | null {
  let text: string;
  try {
    text = readFileSync(statusFile, 'utf8').trim();
  } catch {
    return null;
  }
  if (!/^\d+$/.test(text)) return null;
  return fromStatus(Number(text));
}

/** A shell's `$?`: 128 + N means ended by signal N (as a shell reports it). */
export function fromStatus(c: number): Pick<ProcessResult, 'exitCode' | 'signal'> {
  if (c > 128 && c < 160) {
    const name = Object.entries(osConstants.signals).find(([, n]) => n === c - 128)?.[0];
    if (name) return { exitCode: null, signal: name };
  }
  return { exitCode: c, signal: null };
}

/** The reason of an attached process that ended with no status recorded (its shim was killed too). */
export const EXIT_UNKNOWN = 'ended while the agent was restarting, with no exit status recorded';

/**
 * A running attempt this agent did not start: its previous run did, then restarted (upgrade,
 * SIGTERM, crash). Its process group is found by the recorded pid (the shim's, which leads the
 * group); the agent is not its parent, so it watches the shim (every `pollMs`) and, once the shim is
 * gone, takes the outcome from the status file. Kills and timeouts work as for a process it started.
 */
export function attachProcess(opts: {
  pid: number;
  statusFile: string;
  killGraceMs: number;
  /** The attempt's timeout, and how much of it is left (it started under the previous agent). */
  timeout?: { seconds: number; remainingMs: number } | null;
  pollMs?: number;
  /** Its cgroups, reopened (CgroupTree.open): kills and the end go by them, as for a process the agent started. */
  cgroup?: AttemptCgroup | null;
}): ProcessHandle {
  const { pid } = opts;
  let resolveDone!: (r: ProcessResult) => void;
  const done = new Promise<ProcessResult>((resolve) => (resolveDone = resolve));
  let killReason: KillCause | null = null;
  let killing: Promise<void> | null = null;
  let over = false;
  const cgroup = opts.cgroup ?? null;
  const finish = async () => {
    over = true;
    clearInterval(poll);
    clearTimeout(timer);
    // Descendants the command left behind go with it, as for a process the agent started.
    if (cgroup) await (killing ?? Promise.resolve()).then(() => emptyCgroup(cgroup));
    else await (killing ?? (processGroupAlive(pid) ? killProcessGroup(pid, opts.killGraceMs) : Promise.resolve()));
    const status = readExitStatus(opts.statusFile);
    if (status) return resolveDone(ended(status, killReason));
    resolveDone(
      killReason
        ? { kind: killReason.kind, exitCode: null, signal: null, reason: killReason.text }
        : { kind: 'unknown', exitCode: null, signal: null, reason: EXIT_UNKNOWN },
    );
  };
  const poll = setInterval(() => {
    if (!over && !leaderRunning(pid)) void finish();
  }, opts.pollMs ?? 250);
  const t = opts.timeout;
  const timer = t ? setTimeout(() => void kill({ kind: 'timeout', text: `timeout after ${t.seconds} s` }), Math.max(0, t.remainingMs)) : undefined;
  const kill = (reason: KillCause, graceMs = opts.killGraceMs): Promise<void> => {
    if (over) return done.then(() => undefined);
    killReason ??= reason;
    killing ??= (cgroup ? stopCgroup(cgroup, graceMs) : killProcessGroup(pid, graceMs)).then(() => undefined);
    return killing.then(() => (over ? done : finish().then(() => done))).then(() => undefined);
  };
  if (!leaderRunning(pid)) void finish();
  const leave = () => {
    clearInterval(poll);
    clearTimeout(timer);
  };
  return { pid, started: Promise.resolve(pid), done, kill: (why, graceMs) => kill({ kind: 'killed', text: `killed: ${why}` }, graceMs), leave };
}

/** Whether the process itself (not its group) still runs: not gone, not a zombie. */
export function leaderRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}
