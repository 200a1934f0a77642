/**
 * Which uids the agents of this host have handed out to their attempts, so that two agents (`gantry
 * up` starts several, each a process of its own) never give the same uid to two attempts at once
 * (docs/containment.md, "The unprivileged user"). One file per uid held, `<dir>/<boot id>/<uid>`,
 * made with O_EXCL (only one agent can make it) and naming the agent's data directory and either
 * an attempt (one a restarted agent adopted) or none (`FOR_THE_AGENT`: a uid the agent took for
 * its attempts and keeps between them, docs/containment.md "The agent's idle uids"). The agent of
 * that data directory removes it: when an attempt it names is settled, when the agent stops (its
 * idle ones), or, at its next start, when it is not one it recovered. A crashed agent's uids
 * therefore stay held until it starts again (its attempts may still run as them; after a restart
 * it adopts them).
 *
 * One held for an agent that will not start again (its data directory, or the attempt's directory
 * in it, is gone) and as which no process runs is an orphan: any agent starting reclaims it
 * (`reclaimOrphans`). Reclaimers exclude each other (a directory made by mkdir, held for a few
 * system calls), and each removes a file only after reading it again under that exclusion: nobody
 * else removes an orphan's file (its agent is gone), so what it removes is what it judged, never a
 * file another agent has just made in its place.
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

/**
 * The attempt a file names when it is held for the agent itself, not one attempt: an agent of the
 * previous version judges such a file an orphan only when `<dataDir>/attempts/` is gone (its rule
 * joins the attempt's name to it), and its own next start gives it back as one it did not adopt.
 */
export const FOR_THE_AGENT = '';

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

  /**
   * Gives `uid` back if `attemptId` of this agent still holds it (its file may have been reclaimed
   * and taken by another since, were the attempt's directory removed by hand).
   */
  drop(uid: number, attemptId: string): void {
    const h = this.holder(uid);
    if (h?.dataDir !== this.dataDir || h.attemptId !== attemptId) return;
    this.unlink(uid);
  }

  /** Whether `uid`'s file still names this agent, for no attempt (not reclaimed since: see FOR_THE_AGENT). A read, no write. */
  heldForUs(uid: number): boolean {
    const h = this.holder(uid);
    return h?.dataDir === this.dataDir && h.attemptId === FOR_THE_AGENT;
  }

  private unlink(uid: number): void {
    try {
      unlinkSync(this.file(uid));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  /** The uids this agent's data directory holds, as its files say (what a previous run of it left). */
  ours(): { uid: number; attemptId: string }[] {
    return this.held()
      .filter(({ holder }) => holder.dataDir === this.dataDir)
      .map(({ uid, holder }) => ({ uid, attemptId: holder.attemptId }));
  }

  /**
   * Removes the files of holders `orphaned` says are gone for good; the uids they free. Skipped
   * when another agent reclaims at the same moment (or one died doing it: then until the next boot).
   */
  reclaimOrphans(orphaned: (uid: number, h: UidHolder) => boolean): number[] {
    const candidates = this.held().filter(({ uid, holder }) => holder.dataDir !== this.dataDir && orphaned(uid, holder));
    if (candidates.length === 0) return [];
    const mutex = join(this.dir, '.reclaiming');
    try {
      mkdirSync(mutex, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return [];
      throw err;
    }
    const freed: number[] = [];
    try {
      for (const { uid, holder } of candidates) {
        const now = this.holder(uid);
        if (!now || JSON.stringify(now) !== JSON.stringify(holder)) continue;
        this.unlink(uid);
        freed.push(uid);
      }
    } finally {
      rmSync(mutex, { recursive: true, force: true });
    }
    return freed;
  }

  /** Every uid held, with its holder (files being written aside, or unreadable, left out). */
  private held(): { uid: number; holder: UidHolder }[] {
    const out: { uid: number; holder: UidHolder }[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!/^\d+$/.test(name)) continue;
      const holder = this.holder(Number(name));
      if (holder) out.push({ uid: Number(name), holder });
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
