/**
 * Starting an acknowledged attempt's process: in its own group (process-runner.ts), through the
 * launcher when there is one (launcher.ts, off the agent's event loop), with the attempt's
 * environment, its checkpoint directory (a preemptible stage's, kept across its attempts) and its
 * progress file. What happens around the process (its pid recorded, its log shipped, its kill) is
 * the attempt runner's (attempt-runner.ts).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import type { AttemptPaths } from '../disk/agent-state.js';
import { attemptOwnEnv } from './attempt-env.js';
import type { Launcher } from './launcher.js';
import { notStarted, runProcess, type ProcessHandle } from './process-runner.js';
import type { AttemptCgroup } from '../contain/attempt-cgroup.js';
import type { CgroupTree } from '../contain/cgroup-tree.js';
import type { LaunchContainment } from '../contain/launch-containment.js';
import { errorText } from '../../lib/error-text.js';
import { ProgressFile } from './stage-progress.js';

export interface LaunchContext {
  machineName: string;
  /** The agent's environment as attempts inherit it (attempt-env.ts). */
  inheritedEnv: Readonly<Record<string, string>>;
  /** Where checkpoint directories live (AgentOptions.checkpointRoot). */
  checkpointRoot: string;
  killGraceMs: number;
  /** Starts commands from a small program (launcher.ts); null: every attempt is spawned by the agent. */
  launcher: Launcher | null;
  /** Where attempts' cgroups are made (cgroup-tree.ts); null: none (containment off, or nothing usable). */
  cgroups: CgroupTree | null;
  /** An attempt's pids limit when its assignment says none (--pids-max). */
  pidsMax: number;
}

export interface Launched {
  handle: ProcessHandle;
  /** Its GANTRY_PROGRESS_FILE, followed while it runs. */
  progress: ProgressFile | null;
  /** Its cgroups, made and limited before the command started; null: it has none. */
  cgroup: AttemptCgroup | null;
}

export async function launchAttempt(ctx: LaunchContext, a: AssignmentWire, paths: AttemptPaths): Promise<Launched> {
  const opts = {
    command: a.command,
    cwd: paths.work,
    stdoutFile: paths.stdout,
    stderrFile: paths.stderr,
    statusFile: paths.status,
    timeoutSeconds: a.timeoutSeconds,
    killGraceMs: ctx.killGraceMs,
  };
  // A preemptible stage's checkpoint directory: one per job and stage, kept across its attempts,
  // so that an attempt preempted (TERM, its grace to write there) is resumed by the next.
  const checkpoint = a.checkpoint ? join(ctx.checkpointRoot, a.jobId, a.stageName) : null;
  if (checkpoint) await mkdir(checkpoint, { recursive: true });
  // Where the stage may say how far it has come (a JSON line a step); the agent reads it when it heartbeats.
  const progressFile = join(paths.dir, 'progress.jsonl');
  const own = attemptOwnEnv(a, { ...paths, checkpoint, progress: progressFile }, ctx.machineName);
  // Its cgroups, limited, before anything of it runs (docs/containment.md): the command joins them
  // itself before it execs. Ones the kernel refuses leave it unstarted (spawn-failed, saying which
  // file), as a command that cannot be contained is.
  let cgroup: AttemptCgroup | null;
  try {
    cgroup = ctx.cgroups?.create(a.attemptId, { limits: a.limits ?? null, pidsMax: ctx.pidsMax, gpuIndices: a.gpuIndices }) ?? null;
  } catch (err) {
    return { handle: notStarted(new Error(`cannot contain the command: ${errorText(err)}`)), progress: null, cgroup: null };
  }
  // The user and the sandbox's wrap are filled by their parts of containment (docs/containment.md).
  const contain: LaunchContainment | undefined = cgroup ? { procsFiles: cgroup.procsFiles, user: null, wrap: [] } : undefined;
  const contained = { ...opts, ...(contain ? { contain } : {}), cgroup };
  // The launcher starts from the inherited environment already and is given only what the attempt adds.
  const handle =
    ctx.launcher?.run({ ...contained, attemptId: a.attemptId, envChanges: own }) ?? runProcess({ ...contained, env: { ...ctx.inheritedEnv, ...own } });
  return { handle, progress: new ProgressFile(progressFile), cgroup };
}
