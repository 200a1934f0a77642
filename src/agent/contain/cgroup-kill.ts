/**
 * The end of an attempt that has cgroups (docs/containment.md, "The end"): what a process handle
 * (process-runner.ts, launcher.ts) does instead of signaling a process group, which a `setsid`
 * child or a double-forked daemon has left. A stop is SIGTERM to every process of the cgroup, the
 * grace, then the kill of all; after the leader's own exit, whatever is left is killed at once.
 * Either way the handle settles only once the cgroup is empty.
 */
import type { AttemptCgroup } from './attempt-cgroup.js';

/**
 * How long the kill of all waits for the cgroup to empty, sending it again each second: a process
 * in an uninterruptible sleep (a hung network file system) dies only when it wakes. Past this the
 * handle settles all the same; the cgroup's removal then fails, and the next start's sweep retries.
 */
const KILL_WAIT_MS = 10_000;
const KILL_AGAIN_MS = 1000;

/**
 * SIGTERM to every process of the attempt, up to `graceMs` for it to empty, then the kill of all.
 * Returns the last signal sent; null when nothing was left to signal.
 */
export async function stopCgroup(cg: AttemptCgroup, graceMs: number): Promise<'SIGTERM' | 'SIGKILL' | null> {
  if (cg.signal('SIGTERM') === 0 && !cg.populated()) return null;
  if (await cg.waitEmpty(graceMs)) return 'SIGTERM';
  await killUntilEmpty(cg);
  return 'SIGKILL';
}

/** After the leader ended: what it left behind is killed at once, and the attempt is over once its cgroup is empty. */
export async function emptyCgroup(cg: AttemptCgroup): Promise<void> {
  if (!cg.populated()) return;
  await killUntilEmpty(cg);
}

async function killUntilEmpty(cg: AttemptCgroup): Promise<void> {
  for (let waited = 0; waited < KILL_WAIT_MS; waited += KILL_AGAIN_MS) {
    try {
      await cg.killAll();
    } catch {
      // Its kill file refused (the cgroup being removed, a freezer gone): every pid by hand, this round.
      cg.signal('SIGKILL');
    }
    if (await cg.waitEmpty(KILL_AGAIN_MS)) return;
  }
}
