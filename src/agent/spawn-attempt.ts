/**
 * Starting an acknowledged attempt: its process (in its own group, see process-runner.ts), its
 * output followed from its files and shipped to the server (log-tail.ts), its pid on disk (for the next start of the agent, should this one
 * crash) and to the server (one item of a report). Resolves with how the process ended.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { StaleAttempt, type AgentClient } from './agent-client.js';
import { ProgressFile } from './stage-progress.js';
import type { AgentState, AttemptPaths } from './agent-state.js';
import { attemptOwnEnv } from './attempt-env.js';
import { describe, message, type Run } from './attempt-run.js';
import { dropReason, type DropReason } from './drop-reason.js';
import type { Launcher } from './launcher.js';
import { LogTail } from './log-tail.js';
import { runProcess, type ProcessResult } from './process-runner.js';
import type { Reporter } from './reporter.js';

export interface SpawnContext {
  client: AgentClient;
  reporter: Reporter;
  state: AgentState;
  machineName: string;
  /** The agent's environment as attempts inherit it (attempt-env.ts). */
  inheritedEnv: Readonly<Record<string, string>>;
  /** Where checkpoint directories live (AgentOptions.checkpointRoot). */
  checkpointRoot: string;
  killGraceMs: number;
  /** Starts commands from a small bash (launcher.ts); null: every attempt is spawned by the agent. */
  launcher: Launcher | null;
  log: (line: string) => void;
  /** Lines only a verbose agent prints (one per step of every attempt). */
  debug: (line: string) => void;
  /** The agent stops caring about this attempt (Agent.drop): it is killed and nothing is reported. */
  drop: (why: DropReason) => void;
  /** The agent is past stopping: failures are no longer worth a line. */
  halted: () => boolean;
}

export async function spawnAttempt(ctx: SpawnContext, run: Run, paths: AttemptPaths): Promise<ProcessResult> {
  const { a } = run;
  const opts = {
    command: a.command,
    cwd: paths.work,
    stdoutFile: paths.stdout,
    stderrFile: paths.stderr,
    statusFile: paths.status,
    timeoutSeconds: a.timeoutSeconds,
    killGraceMs: ctx.killGraceMs,
  };
  // Through the launcher (launcher.ts, off the agent's event loop) when it can take it: it starts
  // from the inherited environment already and is given only what the attempt adds.
  // A preemptible stage's checkpoint directory: one per job and stage, kept across its attempts,
  // so that an attempt preempted (TERM, its grace to write there) is resumed by the next.
  const checkpoint = a.checkpoint ? join(ctx.checkpointRoot, a.jobId, a.stageName) : null;
  if (checkpoint) await mkdir(checkpoint, { recursive: true });
  // Where the stage may say how far it has come (a JSON line a step); the agent reads it when it heartbeats.
  const progressFile = join(paths.dir, 'progress.jsonl');
  run.progress = new ProgressFile(progressFile);
  const own = attemptOwnEnv(a, { ...paths, checkpoint, progress: progressFile }, ctx.machineName);
  const handle =
    ctx.launcher?.run({ ...opts, attemptId: a.attemptId, envChanges: own }) ?? runProcess({ ...opts, env: { ...ctx.inheritedEnv, ...own } });
  run.handle = handle;
  // A new attempt: the server has none of its log yet.
  const tail = logTail(ctx.client, run, paths, { stdout: 0, stderr: 0 }, (why) => ctx.drop(why));
  run.tail = tail;
  const pid = await handle.started;
  if (pid !== null) tail.follow();
  if (pid !== null) {
    const recorded = await ctx.state.writePid(a.attemptId, pid).then(
      () => true,
      (err) => (ctx.log(`cannot record pid of ${a.attemptId}: ${message(err)}`), false),
    );
    ctx.debug(`attempt ${describe(a)} started pid ${pid}`);
    // Untracked, it could outlive a crash of this agent unseen: better not to run it at all.
    if (!recorded) ctx.drop(dropReason('pid-unrecorded', 'its pid could not be recorded'));
    // A kill that arrived while the process was being spawned.
    if (run.dropped) void handle.kill(run.dropped.detail, run.dropGraceMs);
    // Only records the pid; the attempt was acknowledged before the spawn.
    else
      void ctx.reporter.recordPid(a.attemptId, a.token, pid, run.withdraw.signal).then(
        (r) => {
          if (r?.result === 'stale') ctx.drop(dropReason('stale', `stale: ${r.message ?? 'not current'}`));
          else if (r?.result === 'refused') ctx.log(`pid of ${a.attemptId} refused: ${r.message ?? 'no reason given'}`);
        },
        (err: unknown) => {
          if (!run.dropped && !ctx.halted()) ctx.log(`cannot report pid of ${a.attemptId}: ${message(err)}`);
        },
      );
  }
  return handle.done;
}

/** The shipper of a run's log; a 409 from the server drops the attempt (it is no longer current). */
export function logTail(client: AgentClient, run: Run, paths: AttemptPaths, known: { stdout: number; stderr: number } | null, drop: (why: DropReason) => void): LogTail {
  const { a } = run;
  const tail: LogTail = new LogTail({
    files: { stdout: paths.stdout, stderr: paths.stderr },
    // Not withdrawn with the attempt: a canceled or preempted attempt's last lines (written in its
    // kill grace: a cleanup, a checkpoint) still ship, since the server takes logs of an ended
    // attempt from its token's holder; a stale one's are refused there, and the tail stops.
    send: (pieces) => client.logs(a.attemptId, a.token, pieces),
    known,
    onError: (err) => {
      if (err instanceof StaleAttempt) {
        tail.stop();
        drop(dropReason('stale', 'stale: ' + err.message));
      }
    },
  });
  return tail;
}
