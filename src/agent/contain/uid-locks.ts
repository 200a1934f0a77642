/**
 * Which uids the agents of this host have handed out to their attempts, so that two agents (`gantry
 * up` starts several, each a process of its own) never give the same uid to two attempts at once
 * (docs/containment.md, "The unprivileged user"). One file per uid held, `<dir>/<boot id>/<uid>`,
 * made with O_EXCL (only one agent can make it) and naming the agent's data directory and the
 * attempt. Only the agent of that data directory removes it: when the attempt is settled, or, at
 * its next start, when the attempt is no longer one it recovered. A crashed agent's uids therefore
 * stay held until it starts again (its attempts may still run as them; after a restart it adopts
 * them), never taken over by another agent, so no two agents ever race to remove the same file.
 *
 * The boot id in the path: after a reboot no attempt of the previous boot runs, and its files are
 * in a directory of their own that nobody writes into any more, removed whole by the next agent to
 * start. /run is a tmpfs on most hosts anyway. The directory is root's, 0700: a stage cannot touch it.
 */
import { chmodSync, linkSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface UidHolder {
  dataDir: string;
  attemptId: string;
  pid: number;
}

export class UidLocks {
  private readonly dir: string;
  private readonly boot: string;

  /** `dataDir`: the agent's, resolved: how its own files are told from other agents'. */
  constructor(
    readonly root: string,
    private readonly dataDir: string,
    boot: string = bootId(),
  ) {
    this.dir = join(root, boot);
    this.boot = boot;
  }

  /** Makes the directory (root's, 0700) and removes what earlier boots left. */
  init(): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    chmodSync(this.root, 0o700);
    chmodSync(this.dir, 0o700);
    for (const name of readdirSync(this.root)) {
      if (name !== this.boot) rmSync(join(this.root, name), { recursive: true, force: true });
    }
  }

  /**
   * Takes `uid` for `attemptId` if no agent holds it; false when one does. Written aside, then
   * linked into place: link(2) fails when the name exists, as O_EXCL does, and a file that exists
   * is a whole one (an agent that dies between creating and writing leaves no empty file behind).
   */
  tryTake(uid: number, attemptId: string): boolean {
    const tmp = this.written(uid, attemptId);
    try {
      linkSync(tmp, this.file(uid));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw err;
    } finally {
      unlinkSync(tmp);
    }
  }

  /**
   * Holds `uid` for an attempt this agent recovered (its processes may run as it): taken if free,
   * rewritten if this agent's own already; otherwise the holder, another agent (which cannot
   * happen unless two agents were given the same data directory, or the file was edited by hand).
   */
  claim(uid: number, attemptId: string): UidHolder | null {
    if (this.tryTake(uid, attemptId)) return null;
    const holder = this.holder(uid);
    if (holder && holder.dataDir !== this.dataDir) return holder;
    renameSync(this.written(uid, attemptId), this.file(uid));
    return null;
  }

  /** Gives `uid` back; only ever called for a uid this agent holds. */
  drop(uid: number): void {
    try {
      unlinkSync(this.file(uid));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /** The uids this agent's data directory holds, as its files say (what a previous run of it left). */
  ours(): { uid: number; attemptId: string }[] {
    const out: { uid: number; attemptId: string }[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!/^\d+$/.test(name)) continue;
      const h = this.holder(Number(name));
      if (h?.dataDir === this.dataDir) out.push({ uid: Number(name), attemptId: h.attemptId });
    }
    return out;
  }

  /** Who holds `uid`, or null when nobody does (or its file cannot be read: then it is still held, by someone). */
  holder(uid: number): UidHolder | null {
    try {
      return JSON.parse(readFileSync(this.file(uid), 'utf8')) as UidHolder;
    } catch {
      return null;
    }
  }

  private file(uid: number): string {
    return join(this.dir, String(uid));
  }

  /** A new file, aside (a name that is not a uid, so ours() skips it), holding this agent's claim. */
  private written(uid: number, attemptId: string): string {
    const tmp = join(this.dir, `.${uid}.${process.pid}.${++this.seq}`);
    writeFileSync(tmp, JSON.stringify({ dataDir: this.dataDir, attemptId, pid: process.pid } satisfies UidHolder) + '\n', { mode: 0o600 });
    return tmp;
  }

  private seq = 0;
}

/** The kernel's id of this boot (Linux); elsewhere one name for every boot. */
function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || 'boot';
  } catch {
    return 'boot';
  }
}
