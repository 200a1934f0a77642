/**
 * The environment an attempt's command sees: what it inherits from the agent (PATH, HOME,
 * proxies...: `inheritedEnv`, computed once per agent), then the stage's, then Gantry's variables
 * (`attemptOwnEnv`),
 * which nothing can override. Variables the agent itself was given by an outer Gantry (GANTRY_*) or
 * a GPU mask (CUDA_VISIBLE_DEVICES) are not inherited, so a stage never sees another attempt's
 * identity or GPUs.
 */
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import type { AttemptUser } from '../contain/attempt-users.js';

/**
 * What an attempt's environment adds to the inherited one: for a user of its own, who it is (its
 * HOME is its work/: the agent's HOME is not its to write), then the stage's variables, then
 * Gantry's. A launcher, which starts from the inherited environment already, is given only these.
 */
export function attemptOwnEnv(
  a: AssignmentWire,
  dirs: { work?: string; output: string; input: string; checkpoint?: string | null; progress?: string },
  machineName: string,
  user: AttemptUser | null = null,
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
    // Empty for a CPU stage: CUDA then sees no device, rather than every device on the machine.
    CUDA_VISIBLE_DEVICES: a.gpuIndices.join(','),
    // The indices come from nvidia-smi, which numbers GPUs by PCI bus; CUDA's default order
    // (fastest first) can differ on a machine with mixed GPUs, and would hand out the wrong ones.
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
  };
}

/** What every attempt's environment starts from: the agent's own, without what identifies an attempt or masks GPUs. */
export function inheritedEnv(base: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) {
    if (v === undefined || k.startsWith('GANTRY_') || k === 'CUDA_VISIBLE_DEVICES') continue;
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
