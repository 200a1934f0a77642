/**
 * An attempt's directories as its user needs them (docs/containment.md, "The unprivileged user"),
 * when the agent (root) runs it as a uid of its own:
 *
 *   <data dir>/  attempts/                   0711 root: others pass, cannot list
 *     attempts/<id>/                          0711 root while its command runs, 0700 once settled
 *       work/ output/ input/                  0700, the attempt's uid:gid (input/ with all it holds)
 *       progress.jsonl                        0600, the attempt's: it writes, cannot swap it for a link
 *       stdout.log stderr.log status          the agent's (its launcher opens them for the command)
 *   <checkpoint root>/ <job>/                 0711 root
 *     <job>/<stage>/                          0700, given to each attempt's uid in turn, with its contents
 *
 * The attempt's own directory is root's, so a stage cannot rename or replace anything in it (its
 * work/, its progress file) with a link. It is open (0711) only between the start of the command
 * and the attempt being settled: a settled attempt's uid goes to the next attempt, which must not
 * reach what the last one left (a directory kept for people to look at, or a spare being reused).
 */
import { chmodSync, closeSync, constants, fchownSync, lchownSync, openSync, unlinkSync, type Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { AttemptUser } from '../contain/attempt-users.js';
import type { AttemptPaths } from './agent-state.js';
import { checkPathSegment } from './check-relative-path.js';
import { reownStageTree } from './stage-tree.js';

/** Others may pass through, not list. */
export const PASSABLE = 0o711;
export const PRIVATE_DIR = 0o700;

/**
 * Gives an attempt's directories to its user and opens its own directory for it to pass; before
 * its command starts. Synchronous: about a dozen calls on names in the agent's own directory,
 * each a few microseconds, where each through the thread pool cost ten times more (measured:
 * bench/attempt-setup-cost.ts).
 */
export function openAttemptTo(p: AttemptPaths, user: AttemptUser): void {
  // Nothing of the user runs yet, and the directory is root's and closed (0700): what is in it is
  // as the agent left it. Still walked without following links (a spare's input/, reused).
  for (const d of [p.work, p.output]) {
    lchownSync(d, user.uid, user.gid);
    chmodSync(d, PRIVATE_DIR);
  }
  reownStageTree(p.input, user.uid, user.gid);
  chmodSync(p.input, PRIVATE_DIR);
  giveProgressFile(p.progress, user);
  chmodSync(p.dir, PASSABLE);
}

/** Settled: nobody but the agent reaches what the attempt left (its uid may go to another attempt now). */
export function closeAttemptDir(dir: string): void {
  try {
    chmodSync(dir, PRIVATE_DIR);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/**
 * The file a stage writes its progress to: made by the agent, its user's, in the agent's
 * directory, so that the stage can write it but not replace it (with a link to a secret). A new
 * directory has none, and a spare's was removed when it was emptied: made at once, and one left
 * there (by a crash) removed only when the exclusive create finds it.
 */
function giveProgressFile(path: string, user: AttemptUser): void {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  let fd: number;
  try {
    fd = openSync(path, flags, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    unlinkSync(path);
    fd = openSync(path, flags, 0o600);
  }
  try {
    fchownSync(fd, user.uid, user.gid);
  } finally {
    closeSync(fd);
  }
}

/**
 * A preemptible stage's checkpoint directory, `<root>/<job>/<stage>`, kept across its attempts,
 * ready for this one: given to its user (with what earlier attempts, as other uids, left in it,
 * never through a link) when it has one.
 */
export async function checkpointDirFor(root: string, jobId: string, stageName: string, user: AttemptUser | null): Promise<string> {
  const job = join(root, checkPathSegment(jobId));
  const dir = join(job, checkPathSegment(stageName));
  if (!user) {
    await mkdir(dir, { recursive: true });
    return dir;
  }
  await makePassableDir(job);
  const st = await lstat(dir).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? null : Promise.reject(err)));
  if (!st) {
    await mkdir(dir, { mode: PRIVATE_DIR });
    await chown(dir, user.uid, user.gid);
  } else if (!st.isDirectory()) {
    throw new Error(`checkpoint directory ${dir} is not a directory`);
  } else if (st.uid !== user.uid || st.gid !== user.gid) {
    // Left by an attempt that ran as another uid: everything in it becomes this one's.
    reownStageTree(dir, user.uid, user.gid);
  }
  await chmod(dir, PRIVATE_DIR);
  return dir;
}

/** `dir` made 0711, and whatever of its parents is missing (the agent's umask would make them 0700). */
export async function makePassableDir(dir: string): Promise<void> {
  const missing: string[] = [];
  for (let d = dir; !(await exists(d)); d = dirname(d)) missing.unshift(d);
  for (const d of missing) {
    await mkdir(d).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    });
    await chmod(d, PASSABLE);
  }
  if (missing.length === 0) await chmod(dir, PASSABLE);
}

/**
 * The nearest directory above `path` that other users cannot pass through; null when every one
 * can. A stage running as another user could not reach its work/ below such a directory.
 */
export async function closedAncestor(path: string): Promise<{ dir: string; st: Stats } | null> {
  for (let d = dirname(path); ; d = dirname(d)) {
    const st = await stat(d).catch(() => null);
    if (st && (st.mode & 0o001) === 0) return { dir: d, st };
    if (dirname(d) === d) return null;
  }
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}
