/**
 * What the agent, often root, does in directories a stage can write (its output/ and input/, its
 * checkpoint directory; an attempt's directory once its command ran): list, read, give to a user,
 * remove — without ever following a link the stage placed there (docs/containment.md, "The
 * unprivileged user"). A stage that leaves `output/cred -> /var/lib/gantry/credential`, or swaps a
 * directory for a link while the agent walks it, must not make root read, chown or delete anything
 * outside its own tree.
 *
 * On Linux every step goes through a handle: each entry is opened with O_PATH|O_NOFOLLOW (which
 * opens nothing: a FIFO does not block, a device is not opened; a link is pinned as the link), and
 * the next step names the entry through `/proc/self/fd/<fd>/<name>`, so the directory it is looked
 * up in is exactly the one that was checked, whatever is renamed meanwhile (openat(2) without the
 * binding Node lacks). A regular file is read through a second open of its own handle's path, so
 * what is read is the inode that was checked. Elsewhere, each step is an lstat before it (a race
 * with a process of the stage that still runs remains there).
 *
 * Only regular files and directories are taken. A file whose owner is not the owner of the tree's
 * root (the attempt's user, who made it) is refused too: a hard link to someone else's file (where
 * fs.protected_hardlinks is off) is a file the stage did not write.
 */
import { chownSync, closeSync, constants, fstatSync, lchownSync, lstatSync, openSync, readdirSync, type Stats } from 'node:fs';
import { lstat, open, readdir, readlink, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';

const LINUX = process.platform === 'linux';
/** Linux's O_PATH: the same number on every architecture Node runs on there. */
const O_PATH = 0o10000000;
/** Deeper than this, a tree is refused rather than walked: each level holds a descriptor. */
export const MAX_STAGE_TREE_DEPTH = 128;

/** An entry of a stage's tree the agent will not take, and why (a sentence about `path`). */
export class StageFileRefused extends Error {
  constructor(
    /** '/'-separated, relative to the tree's root ('' for the root itself). */
    readonly path: string,
    readonly why: string,
  ) {
    super(`"${path}" ${why}`);
    this.name = 'StageFileRefused';
  }
}

export interface StageFile {
  /** '/'-separated, relative to the tree's root. */
  path: string;
  size: number;
}

/** An entry reached without following a link, and what it is. */
class Pinned {
  private constructor(
    private readonly fh: FileHandle | null,
    readonly st: Stats,
    private readonly path: string,
  ) {}

  /** `path`'s last component not followed (what is above it is the agent's). */
  static async at(path: string): Promise<Pinned> {
    if (!LINUX) return new Pinned(null, await lstat(path), path);
    const fh = await open(path, O_PATH | constants.O_NOFOLLOW);
    try {
      return new Pinned(fh, await fh.stat(), path);
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  /** A path that names exactly this entry. */
  get here(): string {
    return this.fh ? `/proc/self/fd/${this.fh.fd}` : this.path;
  }

  /** A path naming `name` inside this directory, not through any other. */
  child(name: string): string {
    return this.fh ? `${this.here}/${name}` : join(this.path, name);
  }

  async close(): Promise<void> {
    await this.fh?.close();
  }
}

async function withPin<T>(path: string, use: (p: Pinned) => Promise<T>): Promise<T> {
  const p = await Pinned.at(path);
  try {
    return await use(p);
  } finally {
    await p.close();
  }
}

/** What an entry that is neither a regular file nor a directory is, for a message. */
async function strangeness(st: Stats, parent: Pinned, name: string): Promise<string> {
  if (st.isSymbolicLink()) {
    const to = await readlink(parent.child(name)).catch(() => null);
    return `is a symbolic link${to !== null ? ` (to "${to}")` : ''}`;
  }
  if (st.isFIFO()) return 'is a FIFO';
  if (st.isSocket()) return 'is a socket';
  if (st.isBlockDevice() || st.isCharacterDevice()) return 'is a device';
  return 'is not a regular file';
}

function checkOwner(st: Stats, owner: number, rel: string): void {
  if (st.uid !== owner)
    throw new StageFileRefused(rel, `is owned by uid ${st.uid}, not by the stage's user (${owner}): a link to a file the stage did not write`);
}

/**
 * The regular files under `root`, depth first in name order, with their sizes. A symbolic link, a
 * FIFO, a socket or a device anywhere in it is refused (StageFileRefused), as is a file owned by
 * another than `root`'s owner: what the stage leaves must be files it wrote.
 */
export async function listStageFiles(root: string): Promise<StageFile[]> {
  return withPin(root, async (top) => {
    if (!top.st.isDirectory()) throw new StageFileRefused('', 'is not a directory');
    const out: StageFile[] = [];
    const walk = async (dir: Pinned, rel: string, depth: number): Promise<void> => {
      if (depth > MAX_STAGE_TREE_DEPTH) throw new StageFileRefused(rel, `is nested deeper than ${MAX_STAGE_TREE_DEPTH} directories`);
      const names = (await readdir(dir.here)).sort();
      for (const name of names) {
        const path = rel ? `${rel}/${name}` : name;
        await withPin(dir.child(name), async (e) => {
          if (e.st.isDirectory()) return walk(e, path, depth + 1);
          if (!e.st.isFile()) throw new StageFileRefused(path, await strangeness(e.st, dir, name));
          checkOwner(e.st, top.st.uid, path);
          out.push({ path, size: e.st.size });
        });
      }
    };
    await walk(top, '', 0);
    return out;
  });
}

/**
 * `rel` under `root` opened for reading: a regular file reached through directories only, owned
 * by `root`'s owner, or StageFileRefused. The handle is the caller's to close.
 */
export async function openStageFile(root: string, rel: string): Promise<FileHandle> {
  const names = rel.split('/');
  const pins: Pinned[] = [];
  try {
    let dir = await Pinned.at(root);
    pins.push(dir);
    const owner = dir.st.uid;
    for (let i = 0; i < names.length; i++) {
      if (!dir.st.isDirectory()) throw new StageFileRefused(names.slice(0, i).join('/'), 'is not a directory');
      const e = await Pinned.at(dir.child(names[i]!));
      pins.push(e);
      const path = names.slice(0, i + 1).join('/');
      if (i < names.length - 1) {
        if (!e.st.isDirectory()) throw new StageFileRefused(path, e.st.isSymbolicLink() ? await strangeness(e.st, dir, names[i]!) : 'is not a directory');
      } else {
        if (!e.st.isFile()) throw new StageFileRefused(path, await strangeness(e.st, dir, names[i]!));
        checkOwner(e.st, owner, path);
        return await openPinned(e, path);
      }
      dir = e;
    }
    throw new StageFileRefused(rel, 'names no file');
  } finally {
    for (const p of pins) await p.close();
  }
}

/** A regular file pinned, opened for reading: through its own handle on Linux, so it is that inode. */
async function openPinned(e: Pinned, rel: string): Promise<FileHandle> {
  // On Linux `here` is the handle's magic link, which must be followed (to exactly that inode).
  const fh = await open(e.here, constants.O_RDONLY | constants.O_NONBLOCK | (LINUX ? 0 : constants.O_NOFOLLOW));
  const st = await fh.stat();
  if (!st.isFile() || st.ino !== e.st.ino || st.dev !== e.st.dev) {
    await fh.close();
    throw new StageFileRefused(rel, 'was replaced while it was opened');
  }
  return fh;
}

/**
 * A single file the stage may write (its progress file), in a directory that is the agent's:
 * opened only if it is a regular file (not a link, a FIFO, a device), else null. The handle is the
 * caller's to close.
 */
export async function openRegularFile(path: string): Promise<FileHandle | null> {
  let fh: FileHandle;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    // Absent, or a link (ELOOP): nothing to read.
    return null;
  }
  if ((await fh.stat()).isFile()) return fh;
  await fh.close();
  return null;
}

/**
 * Gives `root` and every directory and regular file under it to uid:gid (a reused directory, a
 * checkpoint kept from an attempt that ran as another uid, the inputs the agent downloaded), never
 * through a link: links, FIFOs and the like are left as they are, their targets untouched.
 *
 * Synchronous, each step through a handle as the other walks are: a call through the thread pool
 * cost about twenty times the call itself (measured: 1.1 ms for an input/ of one directory, against
 * 0.06 ms so), and an attempt's start walks its input/ every time. A large tree holds the agent's
 * event loop for about 10 µs an entry.
 */
export function reownStageTree(root: string, uid: number, gid: number): void {
  const walk = (at: string, path: string, depth: number): void => {
    if (!LINUX) {
      const st = lstatSync(at);
      if (depth === 0 && !st.isDirectory() && !st.isFile()) throw new StageFileRefused('', 'is neither a directory nor a regular file');
      if (!st.isDirectory() && !st.isFile()) return;
      if (st.uid !== uid || st.gid !== gid) lchownSync(at, uid, gid);
      if (st.isDirectory()) walkChildren(at, (name) => join(at, name), path, depth);
      return;
    }
    const fd = openSync(at, O_PATH | constants.O_NOFOLLOW);
    try {
      const st = fstatSync(fd);
      if (depth === 0 && !st.isDirectory() && !st.isFile()) throw new StageFileRefused('', 'is neither a directory nor a regular file');
      if (!st.isDirectory() && !st.isFile()) return;
      // The handle's magic link, followed to exactly the inode that was checked.
      const here = `/proc/self/fd/${fd}`;
      if (st.uid !== uid || st.gid !== gid) chownSync(here, uid, gid);
      if (st.isDirectory()) walkChildren(here, (name) => `${here}/${name}`, path, depth);
    } finally {
      closeSync(fd);
    }
  };
  const walkChildren = (dir: string, child: (name: string) => string, path: string, depth: number): void => {
    if (depth > MAX_STAGE_TREE_DEPTH) throw new StageFileRefused(path, `is nested deeper than ${MAX_STAGE_TREE_DEPTH} directories`);
    for (const name of readdirSync(dir)) walk(child(name), join(path, name), depth + 1);
  };
  walk(root, root, 0);
}

/** Removes `path` and everything under it, never through a link (a link is removed, not what it names). Absent: nothing to do. */
export async function removeStageTree(path: string): Promise<void> {
  let top: Pinned;
  try {
    top = await Pinned.at(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  try {
    if (!top.st.isDirectory()) return await unlink(path);
    await empty(top, path, 0);
  } finally {
    await top.close();
  }
  await rmdir(path);
}

async function empty(dir: Pinned, path: string, depth: number): Promise<void> {
  if (depth > MAX_STAGE_TREE_DEPTH) throw new StageFileRefused(path, `is nested deeper than ${MAX_STAGE_TREE_DEPTH} directories`);
  for (const name of await readdir(dir.here)) {
    const at = dir.child(name);
    let e: Pinned;
    try {
      e = await Pinned.at(at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    try {
      if (e.st.isDirectory()) await empty(e, join(path, name), depth + 1);
    } finally {
      await e.close();
    }
    await (e.st.isDirectory() ? rmdir(at) : unlink(at)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
}
