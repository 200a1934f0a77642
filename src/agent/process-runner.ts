/**
 * Runs one attempt's command: no shell (the argv is the user's, already split), in a new process
 * group so the whole tree can be killed, with stdout and stderr both handed to a callback (shipped
 * to the server) and appended to a log file (kept on disk, complete even when shipping fails).
 * The log file is created with the first output: a command that writes nothing costs no file (on
 * some filesystems each file created under churn costs far more CPU than the rest of an attempt).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { killProcessGroup } from './process-group.js';

export interface ProcessResult {
  exitCode: number | null;
  /** The signal that ended the process, e.g. "SIGKILL". */
  signal: string | null;
  /** Null for a plain exit; "killed: <why>", "timeout after N s" or "spawn failed: <message>" otherwise. */
  reason: string | null;
}

export interface OutputChunk {
  stream: 'stdout' | 'stderr';
  data: string;
}

export interface RunProcessOptions {
  command: string[];
  cwd: string;
  env: Record<string, string>;
  /** Appended to, never truncated: a retried attempt directory keeps what came before. Created with the first output. */
  logFile?: string;
  timeoutSeconds?: number | null;
  /** Time between TERM and KILL. */
  killGraceMs: number;
  onOutput?: (chunk: OutputChunk) => void;
}

export interface ProcessHandle {
  /** Also the process group id; null when the spawn failed. */
  readonly pid: number | null;
  /** Settles once the process exited, both pipes closed and the log file is flushed. Never rejects. */
  readonly done: Promise<ProcessResult>;
  /** TERM the group, KILL it after the grace; resolves once `done` has. Harmless after exit. */
  kill(why: string): Promise<void>;
}

/** Straggler pipes are given this long after the group is gone before they are cut. */
const PIPE_DRAIN_MS = 1000;

export function runProcess(opts: RunProcessOptions): ProcessHandle {
  let resolveDone!: (r: ProcessResult) => void;
  const done = new Promise<ProcessResult>((resolve) => (resolveDone = resolve));
  let log: WriteStream | null = null;
  let settled = false;
  const settle = (r: ProcessResult) => {
    if (settled) return;
    settled = true;
    clearTimeout(timer);
    if (!log || log.destroyed) return resolveDone(r);
    // 'error' as well as 'finish': a log stream that failed never finishes.
    log.once('error', () => resolveDone(r));
    log.end(() => resolveDone(r));
  };
  let timer: NodeJS.Timeout | undefined;

  const [file, ...args] = opts.command;
  let child: ChildProcess;
  try {
    if (file === undefined || file === '') throw new Error('command is empty');
    child = spawn(file, args, { detached: true, cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    settle({ exitCode: null, signal: null, reason: `spawn failed: ${(err as Error).message}` });
    return { pid: null, done, kill: async () => void (await done) };
  }
  const pid = child.pid ?? null;

  // The first reason wins: a timeout that fires while a cancel's grace runs stays a cancel.
  let killReason: string | null = null;
  let killing: Promise<void> | null = null;
  let exit: { code: number | null; signal: string | null } | null = null;
  const killGroup = (reason: string): Promise<void> => {
    if (pid === null || exit) return done.then(() => undefined);
    killReason ??= reason;
    killing ??= killProcessGroup(pid, opts.killGraceMs);
    return killing.then(() => done).then(() => undefined);
  };

  const pipe = (stream: NodeJS.ReadableStream | null, name: OutputChunk['stream']) => {
    if (!stream) return;
    // Decoding per stream keeps a multi-byte character split across two reads in one piece.
    const decoder = new StringDecoder('utf8');
    const emit = (data: string) => {
      if (data === '' || !opts.onOutput) return;
      try {
        opts.onOutput({ stream: name, data });
      } catch {
        // A failing consumer must not take the process down with it; the log file still has it.
      }
    };
    stream.on('data', (buf: Buffer) => {
      if (opts.logFile && !settled) (log ??= openLog(opts.logFile)).write(buf);
      emit(decoder.write(buf));
    });
    stream.on('end', () => emit(decoder.end()));
  };
  pipe(child.stdout, 'stdout');
  pipe(child.stderr, 'stderr');

  child.once('error', (err) => {
    // Before an exit, an error can only mean the process never started (ENOENT, EACCES, bad cwd).
    if (exit) return;
    child.stdout?.destroy();
    child.stderr?.destroy();
    settle({ exitCode: null, signal: null, reason: `spawn failed: ${err.message}` });
  });

  let sweep: Promise<void> = Promise.resolve();
  child.once('exit', (code, signal) => {
    exit = { code, signal };
    clearTimeout(timer);
    // Descendants still alive when the leader exits belong to the attempt and go with it; until
    // they do, they also hold the pipes open, so 'close' would wait for them.
    if (pid !== null) sweep = killing ?? killProcessGroup(pid, opts.killGraceMs);
    void sweep.then(() => {
      // A descendant that left the group (setsid) can keep a pipe open forever; stop reading it.
      const cut = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }, PIPE_DRAIN_MS);
      cut.unref();
    });
  });

  child.once('close', () => {
    const e = exit ?? { code: null, signal: null };
    // Settle only once the group is gone, so a finished attempt never leaves a process behind.
    void sweep.then(() => settle({ exitCode: e.code, signal: e.signal, reason: killReason }));
  });

  const timeoutS = opts.timeoutSeconds ?? 0;
  if (pid !== null && timeoutS > 0) {
    timer = setTimeout(() => void killGroup(`timeout after ${timeoutS} s`), timeoutS * 1000);
  }

  return {
    pid,
    done,
    kill: (why: string) => killGroup(`killed: ${why}`),
  };
}

function openLog(path: string): WriteStream {
  const stream = createWriteStream(path, { flags: 'a' });
  // Losing the local copy (disk full, directory gone) must not fail the attempt itself.
  stream.on('error', () => {});
  return stream;
}
