/**
 * The environment an attempt's command sees: what it inherits from the agent (PATH, HOME,
 * proxies...: `inheritedEnv`, computed once per agent), then the stage's, then Gantry's variables
 * (`attemptOwnEnv`),
 * which nothing can override. Variables the agent itself was given by an outer Gantry (GANTRY_*) or
 * a GPU mask (CUDA_VISIBLE_DEVICES, and the MPS bounds of a share) are not inherited, so a stage
 * never sees another attempt's identity, GPUs or share.
 */
import type { AssignmentWire, GangWire } from '../../api/contract/agent-protocol.js';
import type { AttemptUser } from '../contain/attempt-users.js';

/**
 * What an attempt's environment adds to the inherited one: for a user of its own, who it is (its
 * HOME is its work/: the agent's HOME is not its to write), then the stage's variables, then
 * Gantry's, its GPUs' last (`gpuEnv`, attempt-gpus.ts). A launcher, which starts from the
 * inherited environment already, is given only these.
 */
export function attemptOwnEnv(
  a: AssignmentWire,
  dirs: { work?: string; output: string; input: string; checkpoint?: string | null; progress?: string },
  machineName: string,
  user: AttemptUser | null,
  gpuEnv: Readonly<Record<string, string>>,
): Record<string, string> {
  return {
    ...(user ? userEnv(user, dirs.work) : {}),
    ...a.env,
    GANTRY_JOB_ID: a.jobId,
    GANTRY_STAGE: a.stageName,
    GANTRY_ATTEMPT: String(a.attemptNumber),
    GANTRY_ATTEMPT_ID: a.attemptId,
    GANTRY_MACHINE: machineName,
    GANTRY_OUTPUT_DIR: dirs.output,
    GANTRY_INPUT_DIR: dirs.input,
    ...(dirs.checkpoint ? { GANTRY_CHECKPOINT_DIR: dirs.checkpoint } : {}),
    ...(dirs.progress ? { GANTRY_PROGRESS_FILE: dirs.progress } : {}),
    ...(a.gang ? gangEnv(a.gang) : {}),
    ...gpuEnv,
  };
}

/**
 * A gang's member (docs/gangs.md, "Rendezvous"): Gantry's names, and those torchrun and
 * torch.distributed read. A member is one process per machine: WORLD_SIZE counts members, RANK and
 * NODE_RANK are its rank, LOCAL_WORLD_SIZE is 1 (torchrun, run as the member's command, sets these
 * anew for the workers it starts, from its own --nproc-per-node).
 */
function gangEnv(g: GangWire): Record<string, string> {
  return {
    GANTRY_GANG_SIZE: String(g.size),
    GANTRY_GANG_RANK: String(g.rank),
    GANTRY_GANG_MASTER_ADDR: g.masterAddr,
    GANTRY_GANG_MASTER_PORT: String(g.masterPort),
    MASTER_ADDR: g.masterAddr,
    MASTER_PORT: String(g.masterPort),
    WORLD_SIZE: String(g.size),
    RANK: String(g.rank),
    NODE_RANK: String(g.rank),
    LOCAL_WORLD_SIZE: '1',
  };
}

/** Set per attempt (attempt-gpus.ts) or not at all: never the agent's own. CUDA_MPS_PIPE_DIRECTORY, where the MPS daemon listens, is inherited. */
const ATTEMPT_GPU_VARIABLES = new Set(['CUDA_VISIBLE_DEVICES', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT']);

/** What every attempt's environment starts from: the agent's own, without what identifies an attempt or masks GPUs. */
export function inheritedEnv(base: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) {
    if (v === undefined || k.startsWith('GANTRY_') || ATTEMPT_GPU_VARIABLES.has(k)) continue;
    env[k] = v;
  }
  return env;
}

/**
 * A switched user's identity as programs look it up: HOME, and USER and LOGNAME (a dynamic uid has
 * no name in /etc/passwd, so it gets `gantry-<uid>`: Python's getpass.getuser(), which PyTorch's
 * caches call, reads these first and fails without them).
 */
function userEnv(user: AttemptUser, work: string | undefined): Record<string, string> {
  const name = user.name ?? `gantry-${user.uid}`;
  return { ...(work ? { HOME: work } : {}), USER: name, LOGNAME: name };
}
