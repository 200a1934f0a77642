/**
 * Starting an acknowledged attempt's process: in its own group (process-runner.ts), through the
 * launcher when there is one (launcher.ts, off the agent's event loop), as its user (a uid of its
 * own when the agent is root: attempt-users.ts, its directories given to it: attempt-owner.ts),
 * with the attempt's environment, its checkpoint directory (a preemptible stage's, kept across its
 * attempts) and its progress file. What happens around the process (its pid recorded, its log
 * shipped, its kill) is the attempt runner's (attempt-runner.ts).
 */
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import type { AttemptUser, AttemptUsers } from '../contain/attempt-users.js';
import type { AttemptPaths } from '../disk/agent-state.js';
import { checkpointDirFor, openAttemptTo } from '../disk/attempt-owner.js';
import { attemptOwnEnv } from './attempt-env.js';
import type { Launcher } from './launcher.js';
import { notStarted, runProcess, type ProcessHandle } from './process-runner.js';
import type { AttemptCgroup, AttemptCgroupSpec } from '../contain/attempt-cgroup.js';
import type { CgroupTree } from '../contain/cgroup-tree.js';
import type { CgroupRef } from '../contain/attempt-cgroup.js';
import type { LaunchContainment } from '../contain/launch-containment.js';
import { sandboxArgv, type SandboxTool } from '../contain/sandbox-argv.js';
import { ProgressFile } from './stage-progress.js';
import { errorText } from '../../lib/error-text.js';
import type { GpuSharingMode } from '../../api/contract/containment.js';
import type { DetectedGpu } from '../machine/machine-detect.js';
import { attemptGpus, type AttemptGpus } from './attempt-gpus.js';
import { gangPortProblem } from './gang-port-check.js';

export interface LaunchContext {
  machineName: string;
  /** The agent's environment as attempts inherit it (attempt-env.ts). */
  inheritedEnv: Readonly<Record<string, string>>;
  /** Where checkpoint directories live (AgentOptions.checkpointRoot). */
  checkpointRoot: string;
  killGraceMs: number;
  /** Starts commands from a small program (launcher.ts); null: every attempt is spawned by the agent. */
  launcher: Pick<Launcher, 'run'> | null;
  /** Who the attempt runs as; held from here until the attempt is settled (the runner releases it). */
  users: Pick<AttemptUsers, 'acquire'>;
  /** Where attempts' cgroups are made (cgroup-tree.ts); null: none (containment off, or nothing usable). */
  cgroups: Pick<CgroupTree, 'create' | 'release'> | null;
  /** Journals the recycled cgroup an attempt is given, before its command starts (AgentState.recordCgroup). */
  recordCgroup: (attemptId: string, ref: CgroupRef) => void;
  /** An attempt's pids limit when its assignment says none (--pids-max). */
  pidsMax: number;
  /** A line for the agent's log. */
  log: (line: string) => void;
  /** What every command is wrapped in (--sandbox, sandbox-argv.ts); null: no sandbox. */
  sandbox: SandboxTool | null;
  /** The machine's GPUs as registered: what an assignment's indices name (attempt-gpus.ts). */
  gpus: readonly DetectedGpu[];
  /** How a share of a GPU is bounded (--gpu-sharing). */
  gpuSharing: GpuSharingMode;
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
  const failed = (why: string): Launched => ({ handle: notStarted(new Error(why)), progress: null, cgroup: null });
  // A gang's rank 0: its master port must be free here, or the whole gang would wait on a member
  // that cannot listen (gang-port-check.ts). Checked before anything is taken for the attempt.
  const portProblem = await gangPortProblem(a.gang);
  if (portProblem !== null) return failed(portProblem);
  let gpus: AttemptGpus;
  try {
    gpus = attemptGpus(a, ctx.gpus, ctx.gpuSharing);
  } catch (err) {
    return failed(`its GPUs: ${errorText(err)}`);
  }
  // Not run rather than run as root, or without its directories: it ends `spawn-failed`, saying why.
  let user: AttemptUser | null;
  try {
    user = ctx.users.acquire(a.attemptId);
  } catch (err) {
    return failed(`no user to run it as: ${errorText(err)}`);
  }
  let checkpoint: string | null = null;
  try {
    if (user) openAttemptTo(paths, user);
    // A preemptible stage's checkpoint directory: one per job and stage, kept across its attempts,
    // so that an attempt preempted (TERM, its grace to write there) is resumed by the next.
    if (a.checkpoint) checkpoint = await checkpointDirFor(ctx.checkpointRoot, a.jobId, a.stageName, user);
  } catch (err) {
    return failed(`cannot prepare its directories${user ? ` for uid ${user.uid}` : ''}: ${errorText(err)}`);
  }
  // Where the stage may say how far it has come (a JSON line a step); the agent reads it when it heartbeats.
  const own = attemptOwnEnv(a, { ...paths, checkpoint }, ctx.machineName, user, gpus.env);
  let wrap: string[] = [];
  try {
    if (ctx.sandbox) {
      const dirs = { work: paths.work, output: paths.output, input: paths.input, checkpoint, progressFile: paths.progress };
      wrap = sandboxArgv({ tool: ctx.sandbox, gpuIndices: gpus.deviceMinors, nvidiaCaps: gpus.nvidiaCaps, dirs, network: a.limits?.network ?? false });
    }
  } catch (err) {
    return failed(`cannot sandbox the command: ${errorText(err)}`);
  }
  const spec: AttemptCgroupSpec = { limits: a.limits ?? null, pidsMax: ctx.pidsMax, gpuIndices: gpus.deviceMinors, nvidiaCaps: gpus.nvidiaCaps };
  const start = (fresh: boolean, journaled: boolean): Launched => {
    // Its cgroups, limited, before anything of it runs (docs/containment.md): the command joins
    // them itself before it execs. Ones the kernel refuses leave it unstarted (spawn-failed,
    // saying which file), as a command that cannot be contained is.
    let cgroup: AttemptCgroup | null = null;
    try {
      cgroup = ctx.cgroups?.create(a.attemptId, spec, { fresh }) ?? null;
      // A recycled one is named after another attempt: a restart must find it by this record, and
      // a new one made after a recycled one was journaled must replace that record.
      const ref = cgroup && (cgroup.ref ?? (journaled ? { name: cgroup.name, baseline: cgroup.baseline } : null));
      if (ref) ctx.recordCgroup(a.attemptId, ref);
    } catch (err) {
      // Made, but not recorded: given back (nothing ran in it).
      if (cgroup) void ctx.cgroups?.release(cgroup).catch(() => {});
      return failed(`cannot contain the command: ${errorText(err)}`);
    }
    const contain: LaunchContainment | undefined =
      cgroup || user || wrap.length ? { procsFiles: cgroup?.procsFiles ?? [], user: user ? { uid: user.uid, gid: user.gid } : null, wrap } : undefined;
    const contained = { ...opts, ...(contain ? { contain } : {}), cgroup };
    // The launcher starts from the inherited environment already and is given only what the attempt adds.
    const handle =
      ctx.launcher?.run({ ...contained, attemptId: a.attemptId, envChanges: own }) ?? runProcess({ ...contained, env: { ...ctx.inheritedEnv, ...own } });
    return { handle, progress: new ProgressFile(paths.progress), cgroup };
  };
  const first = start(false, false);
  if (!first.cgroup || (await first.handle.started) !== null) return first;
  // Not started. One cause a second start cures: a cgroup removed between its mkdir (or the check
  // of a spare) and the child's join, by anyone tidying empty cgroups (docs/containment.md,
  // "Still there"). Started once more in cgroups made for it, never a spare; any other failure,
  // or this one again, ends the attempt spawn-failed as before.
  const end = await first.handle.done;
  if (end.spawnCause !== 'cgroup-gone') return first;
  const gone = first.cgroup;
  // What is left of it (the other hierarchies) holds nothing of this attempt: the child that failed was
  // reaped before the launcher answered. A spare's waiting child killed while still joining may not
  // be reaped yet (the launcher reaps it later): a directory it still holds is left to the next start's sweep.
  await gone
    .remove()
    .catch((err: unknown) => ctx.log(`attempt ${a.attemptId}: cannot remove what is left of its cgroups (${errorText(err)}); the next start sweeps them`));
  ctx.log(`attempt ${a.attemptId}: its cgroup ${gone.name} was removed before its command joined it; starting it again in a new one`);
  const second = start(true, gone.ref !== null);
  // Its end says it was tried twice: a cleaner sweeping every hierarchy can remove the new one too.
  const h = second.handle;
  const done = h.done.then((r) => (r.spawnCause === 'cgroup-gone' ? { ...r, reason: `${r.reason}, twice: the second time in cgroups made for it` } : r));
  return {
    ...second,
    handle: {
      get pid() {
        return h.pid;
      },
      started: h.started,
      done,
      kill: (why, graceMs) => h.kill(why, graceMs),
      leave: () => h.leave(),
    },
  };
}
