/**
 * Signals to a whole process group. Every attempt leads its own group (spawned detached), so
 * killing the group reaches whatever the command started too: a shell's background jobs, a
 * launcher's workers, a dataloader's forks.
 */
import { readFileSync } from 'node:fs';
import { sleep } from '../../lib/sleep.js';
import { procPids } from './proc-pids.js';

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

/**
 * Whether anything in the group still runs. Zombies do not count: the dead children of a killed
 * leader are orphans, reaped whenever init gets to it (seconds, in some containers; never, when
 * the agent itself is PID 1), and a kill must not wait on that.
 */
export function processGroupAlive(pgid: number): boolean {
  if (!signalProcessGroup(pgid, 0)) return false;
  if (process.platform !== 'linux') return true;
  return liveMembersFromProc(pgid);
}

function liveMembersFromProc(pgid: number): boolean {
  const pids = procPids();
  if (pids === null) return true;
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so parse after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}

/**
 * TERM to the group, then KILL once `graceMs` has passed if anything in it is still alive (returns
 * the last signal sent; null when the group was gone already). Polls
 * the group rather than waiting for the leader's exit: a leader that dies on TERM can leave
 * children that ignore it, and those must not outlive the attempt (they would hold its GPUs).
 */
export async function killProcessGroup(pgid: number, graceMs: number, pollMs = 25): Promise<'SIGTERM' | 'SIGKILL' | null> {
  if (!signalProcessGroup(pgid, 'SIGTERM')) return null;
  if (await goneWithin(pgid, graceMs, pollMs)) return 'SIGTERM';
  if (!signalProcessGroup(pgid, 'SIGKILL')) return 'SIGTERM';
  // KILL cannot be refused, but it is delivered asynchronously; callers want the group gone.
  await goneWithin(pgid, KILL_WAIT_MS, pollMs);
  return 'SIGKILL';
}

const KILL_WAIT_MS = 1000;

async function goneWithin(pgid: number, ms: number, pollMs: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    await sleep(Math.min(pollMs, Math.max(1, deadline - Date.now())));
    if (!processGroupAlive(pgid)) return true;
  }
  return !processGroupAlive(pgid);
}
