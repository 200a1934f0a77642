/**
 * Gives files and directories the modes they must have (lib/private-mode.ts), at the start of the
 * server and the agent, so that what an earlier version left readable (0644 files in 0755
 * directories, made under umask 022) is closed by an upgrade too.
 *
 * It runs as root where the agent does, over directories a stage could once write to (before
 * stages had users of their own, they ran as the agent's user): it never follows a symbolic link
 * it finds (a link planted where a log was would otherwise have root chmod whatever it names), it
 * opens only what lstat says is a regular file or a directory (a FIFO would block, a device could
 * act on being opened), and it changes the mode through the descriptor it opened (fchmod), after
 * checking that it is still the inode lstat saw. The configured roots (a data directory, the
 * artifacts' or checkpoints' directory) may be links the operator made: those alone are followed.
 * A directory with the sticky bit (a shared one, as /tmp) is never changed: a data directory
 * given as /tmp must not make /tmp private.
 *
 * Nothing here throws: what cannot be done is a problem line for the process's log, naming the
 * path and why, and the process goes on (a mode it cannot set is no reason not to run).
 */
import {
  chmodSync,
  closeSync,
  constants,
  existsSync,
  fchmodSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  statSync,
  type Dirent,
  type Stats,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { errorText } from '../../lib/error-text.js';

export type Kind = 'file' | 'dir';

/** What `set` found: its kind, and its mode before (to tell whether an earlier version left it loose). */
export interface Found {
  kind: Kind;
  before: number;
}

const STICKY = 0o1000;
/** Problem lines kept beyond this are counted, not listed: a shared directory of a thousand can say so in one line. */
const MAX_PROBLEMS = 20;

export class ModeTightener {
  /** Paths whose mode was changed. */
  readonly changed: string[] = [];
  private readonly listed: string[] = [];
  private unlisted = 0;

  /** What could not be done, one line each (the first MAX_PROBLEMS, then how many more). */
  get problems(): string[] {
    return this.unlisted > 0 ? [...this.listed, `… and ${this.unlisted} more`] : [...this.listed];
  }

  /**
   * Gives `path` exactly `mode` when it is a file or a directory; null when nothing is there, or
   * something it leaves alone (a link, a FIFO, a socket, a device: said in `problems` but for an
   * absent path). `follow`: `path` is a root the operator configured, which may be a link.
   */
  set(path: string, mode: number, opts: { follow?: boolean } = {}): Found | null {
    let st: Stats | undefined;
    try {
      st = opts.follow ? statSync(path, { throwIfNoEntry: false }) : lstatSync(path, { throwIfNoEntry: false });
    } catch (err) {
      this.problem(`${path}: ${errorText(err)}`);
      return null;
    }
    if (!st) return null;
    if (st.isSymbolicLink()) {
      this.problem(`${path} is a symbolic link: left as it is (Gantry keeps no links there; remove it, or make what it names private)`);
      return null;
    }
    const kind: Kind | null = st.isDirectory() ? 'dir' : st.isFile() ? 'file' : null;
    if (!kind) {
      this.problem(`${path} is neither a file nor a directory: left as it is`);
      return null;
    }
    const before = st.mode & 0o7777;
    if (kind === 'dir' && before & STICKY) {
      this.problem(`${path} is a shared directory (sticky bit, as /tmp): not made private; give Gantry a directory of its own`);
      return { kind, before };
    }
    if (before !== mode && this.apply(path, st, kind, mode, opts.follow === true)) this.changed.push(path);
    return { kind, before };
  }

  /** The entries of a directory, [] when it is gone (or unreadable: a problem). */
  entries(dir: string): Dirent[] {
    try {
      return readdirSync(dir, { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.problem(`${dir}: cannot list it: ${errorText(err)}`);
      return [];
    }
  }

  /**
   * Everything below `root` (not `root` itself): directories `dirMode`, files `fileMode`; links
   * and other kinds are passed over in silence (their own mode means nothing, and what they name
   * is not below `root`).
   */
  tree(root: string, dirMode: number, fileMode: number): void {
    const dirs = [root];
    for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
      for (const e of this.entries(dir)) {
        const path = join(dir, e.name);
        if (e.isDirectory()) {
          if (this.set(path, dirMode)?.kind === 'dir') dirs.push(path);
        } else if (e.isFile()) this.set(path, fileMode);
      }
    }
  }

  /** fchmod through a descriptor opened without following a link, on the inode lstat saw; false (a problem said) when it could not. */
  private apply(path: string, seen: Stats, kind: Kind, mode: number, follow: boolean): boolean {
    const flags = constants.O_RDONLY | constants.O_NONBLOCK | (follow ? 0 : constants.O_NOFOLLOW) | (kind === 'dir' ? constants.O_DIRECTORY : 0);
    let fd: number;
    try {
      fd = openSync(path, flags);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return false;
      if (code === 'ELOOP') {
        this.problem(`${path} became a symbolic link: left as it is`);
        return false;
      }
      this.problem(`${path}: cannot open it to set its mode to ${octal(mode)} (it is ${octal(seen.mode & 0o7777)}): ${errorText(err)}`);
      return false;
    }
    try {
      const now = fstatSync(fd);
      if (now.ino !== seen.ino || now.dev !== seen.dev) {
        this.problem(`${path} was replaced while its mode was being set: left as it is`);
        return false;
      }
      fchmodSync(fd, mode);
      return true;
    } catch (err) {
      this.problem(`${path}: cannot set its mode to ${octal(mode)} (it is ${octal(seen.mode & 0o7777)}): ${errorText(err)}`);
      return false;
    } finally {
      closeSync(fd);
    }
  }

  private problem(line: string): void {
    if (this.listed.length < MAX_PROBLEMS) this.listed.push(line);
    else this.unlisted++;
  }
}

/**
 * `mkdir -p` whose every directory it creates has `mode`, whatever the umask (which only takes bits
 * away): a data directory given as a/b/c where a/ is new must not leave a/ 0700 when a stage running
 * as another user has to pass through it. Directories already there keep their mode.
 */
export function makeDirectories(path: string, mode: number): void {
  const missing: string[] = [];
  for (let p = resolve(path); !existsSync(p); p = dirname(p)) missing.unshift(p);
  for (const dir of missing) {
    try {
      mkdirSync(dir);
    } catch (err) {
      // Made meanwhile by another (an agent of the same `gantry up`): its maker gave it its mode.
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw err;
    }
    chmodSync(dir, mode);
  }
}

export function octal(mode: number): string {
  return '0' + mode.toString(8).padStart(3, '0');
}
