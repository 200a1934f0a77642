/**
 * Signals to a whole process group. Every attempt leads its own group (spawned detached), so
 * killing the group reaches whatever the command started too: a shell's background jobs, a
 * launcher's workers, a dataloader's forks.
 */

/** Sends `signal` to process group `pgid`; false when the group no longer exists. */
export function signalProcessGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    // ESRCH is the normal end of every kill: the group already exited, maybe a moment ago.
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
}

export function processGroupAlive(pgid: number): boolean {
  return signalProcessGroup(pgid, 0);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * TERM to the group, then KILL once `graceMs` has passed if anything in it is still alive. Polls
 * the group rather than waiting for the leader's exit: a leader that dies on TERM can leave
 * children that ignore it, and those must not outlive the attempt (they would hold its GPUs).
 */
export async function killProcessGroup(pgid: number, graceMs: number, pollMs = 20): Promise<void> {
  if (!signalProcessGroup(pgid, 'SIGTERM')) return;
  if (await goneWithin(pgid, graceMs, pollMs)) return;
  if (!signalProcessGroup(pgid, 'SIGKILL')) return;
  // KILL cannot be refused, but the dead stay in the group as zombies until their parent (or
  // init, for orphans) reaps them; callers want to know the group is gone, so wait a little.
  await goneWithin(pgid, REAP_WAIT_MS, pollMs);
}

const REAP_WAIT_MS = 1000;

async function goneWithin(pgid: number, ms: number, pollMs: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    await sleep(Math.min(pollMs, Math.max(1, deadline - Date.now())));
    if (!processGroupAlive(pgid)) return true;
  }
  return !processGroupAlive(pgid);
}
