/**
 * Who each attempt runs as (docs/containment.md, "The unprivileged user"), decided once from the
 * agent's options (attemptUserPolicy) and handed out per attempt (AttemptUsers):
 *
 * - the agent is not root, or containment is `off`: the agent's own user (`user` null: nothing is
 *   switched, and nothing keeps a stage from the agent's files; the report says so);
 * - `--run-as NAME|UID`: that user of /etc/passwd, for every attempt (its uid and primary gid);
 * - otherwise dynamic: the lowest uid of `--uid-range` that no running attempt of this agent holds,
 *   that /etc/passwd and /etc/group do not list, and that no other agent of the host holds
 *   (uid-locks.ts); its gid the same number, no supplementary groups. One the agent holds already
 *   and none of its attempts runs as (its idle uids) comes first: no file is written for it.
 *
 * A uid is acquired when the attempt's command is about to start and released once the attempt is
 * settled (nothing more of it runs, its directory closed: agent-state.ts). Released, it stays held
 * for the agent on disk (its file names no attempt: uid-locks.ts FOR_THE_AGENT) and goes to the
 * agent's next attempt without a file made, linked or removed (four metadata changes of the
 * filesystem a stage, the largest system calls of the agent's profile); the agent gives its idle
 * uids back when it stops (close), or its next start does. After a restart, an
 * attempt that still runs or still owes its outcome keeps its uid, read back from the owner of its
 * work/ directory (`adopt`); whatever else the previous run held is released (`forgetOthers`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { procPids } from '../attempt/proc-pids.js';
import { join, resolve } from 'node:path';
import { ContainmentOptionError, type ContainmentOptions } from './containment-options.js';
import { fileMark, GROUP_FILE, PASSWD_FILE, readGroupIds, readPasswd, type PasswdEntry } from './passwd-file.js';
import { FOR_THE_AGENT, UidLocks, type UidHolder } from './uid-locks.js';

/** A user an attempt's command runs as (launch-containment.ts's `user`). */
export interface AttemptUser {
  readonly uid: number;
  readonly gid: number;
  /** Its name in /etc/passwd; null for a dynamic uid, which has none. */
  readonly name: string | null;
}

export type AttemptUserPolicy =
  /** `detail`: with `closed-dir`, which directory keeps other users out. */
  | { kind: 'agent'; uid: number; name: string; why: 'not-root' | 'containment-off' | 'closed-dir'; detail?: string }
  | { kind: 'run-as'; user: AttemptUser & { name: string } }
  | { kind: 'dynamic'; first: number; last: number };

export interface UserHost {
  /** The agent's own uid (process.getuid()). */
  agentUid: number;
  passwdFile: string;
  groupFile: string;
  /** Whether any process runs as `uid` (real, effective, saved or file-system uid). */
  runsAs: (uid: number) => boolean;
}

export function defaultUserHost(): UserHost {
  return { agentUid: process.getuid?.() ?? 0, passwdFile: PASSWD_FILE, groupFile: GROUP_FILE, runsAs: processRunsAs };
}

/**
 * /proc/<pid>/status's `Uid:` line, for every process: the owner of /proc/<pid> is not enough (a
 * process that made itself not dumpable shows as root's). Without /proc, every uid counts as used.
 * A scan of the whole process table: called only for the few uids an agent that is gone held.
 */
function processRunsAs(uid: number): boolean {
  const pids = procPids();
  if (pids === null) return true;
  for (const pid of pids) {
    try {
      const line = /^Uid:\s+(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? '';
      if (line.split(/\s+/).map(Number).includes(uid)) return true;
    } catch {
      // gone meanwhile
    }
  }
  return false;
}

/** The policy for these options on this host; an unknown `--run-as` user, or root, is a ContainmentOptionError. */
export function attemptUserPolicy(c: Pick<ContainmentOptions, 'mode' | 'uidRange' | 'runAs'>, host: UserHost = defaultUserHost()): AttemptUserPolicy {
  if (host.agentUid !== 0 || c.mode === 'off') {
    // Asked for by name, a user that cannot be had is an error, not a quiet fallback to the agent's.
    if (c.runAs !== null && host.agentUid !== 0)
      throw new ContainmentOptionError(`--run-as ${c.runAs}: only an agent running as root can run stages as another user`);
    if (c.runAs !== null) throw new ContainmentOptionError(`--run-as ${c.runAs}: containment is off, which switches no user`);
    return { kind: 'agent', uid: host.agentUid, name: agentName(host), why: host.agentUid !== 0 ? 'not-root' : 'containment-off' };
  }
  if (c.runAs !== null) return { kind: 'run-as', user: lookUpRunAs(c.runAs, readPasswd(host.passwdFile), host.passwdFile) };
  return { kind: 'dynamic', first: c.uidRange[0], last: c.uidRange[1] };
}

/**
 * The policy once the directories attempts work in are known: a user of its own could not reach
 * them below `closed` (a directory others cannot pass through, e.g. a data directory in /root). An
 * explicit `--run-as` is then an error; the default (a dynamic uid) falls back to the agent's
 * user, and says why (userProblem), as `auto` does for what the host does not offer.
 */
export function reachablePolicy(p: AttemptUserPolicy, closed: { dir: string; mode: number } | null, host: UserHost = defaultUserHost()): AttemptUserPolicy {
  if (!closed || p.kind === 'agent') return p;
  const detail = `${closed.dir} (mode ${(closed.mode & 0o7777).toString(8).padStart(4, '0')}) does not let other users pass through to the attempts' directories; make it 0711`;
  if (p.kind === 'run-as') throw new ContainmentOptionError(`--run-as ${p.user.name}: ${detail}`);
  return { kind: 'agent', uid: host.agentUid, name: agentName(host), why: 'closed-dir', detail };
}

function agentName(host: UserHost): string {
  return readPasswd(host.passwdFile).find((e) => e.uid === host.agentUid)?.name ?? `uid-${host.agentUid}`;
}

/** What `ContainmentReport.user` says of a policy: `dynamic 61184-65519`, `run-as nobody (65534)`, `agent root (0)`. */
export function userReport(p: AttemptUserPolicy): string {
  switch (p.kind) {
    case 'dynamic':
      return `dynamic ${p.first}-${p.last}`;
    case 'run-as':
      return `run-as ${p.user.name} (${p.user.uid})`;
    case 'agent':
      return `agent ${p.name} (${p.uid})`;
  }
}

/** Why stages are not kept from the agent's files, for `ContainmentReport.problems`; null when they are. */
export function userProblem(p: AttemptUserPolicy): string | null {
  if (p.kind !== 'agent') return null;
  switch (p.why) {
    case 'not-root':
      return `the agent is not root: stages run as its own user (${p.name}) and can read its credential and every attempt's files`;
    case 'containment-off':
      return `containment is off: stages run as the agent's user (${p.name})`;
    case 'closed-dir':
      return `stages run as the agent's user (${p.name}): ${p.detail ?? 'a directory keeps other users out'}`;
  }
}

function lookUpRunAs(runAs: string, users: PasswdEntry[], file: string): AttemptUser & { name: string } {
  const byUid = /^\d+$/.test(runAs) ? users.find((e) => e.uid === Number(runAs)) : undefined;
  const e = byUid ?? users.find((u) => u.name === runAs);
  if (!e) throw new ContainmentOptionError(`--run-as ${runAs}: no such user in ${file} (give a user name or uid listed there)`);
  if (e.uid === 0)
    throw new ContainmentOptionError(
      `--run-as ${runAs}: that is root, and stages would run with every privilege; leave --run-as unset for a uid of its own per attempt`,
    );
  return { uid: e.uid, gid: e.gid, name: e.name };
}

export class AttemptUsers {
  /** Uids held by this agent's attempts. */
  private readonly held = new Map<string, AttemptUser>();
  private readonly inUse = new Set<number>();
  /** Uids this run took for the agent (their files name no attempt): kept when released, in `idle`. */
  private readonly pooled = new Set<number>();
  /** Pooled uids no attempt of this agent runs as: its next attempts' first. */
  private readonly idle = new Set<number>();
  private readonly locks: UidLocks | null;
  /** Uids and gids the host's files list, read again when either file changes. */
  private listed: { mark: string; ids: Set<number> } = { mark: '', ids: new Set() };

  constructor(
    readonly policy: AttemptUserPolicy,
    dataDir: string,
    lockDir: string,
    private readonly host: UserHost = defaultUserHost(),
  ) {
    this.locks = policy.kind === 'dynamic' ? new UidLocks(lockDir, resolve(dataDir)) : null;
    this.locks?.init();
  }

  /** Whether attempts run as another user than the agent's (their directories are then given to it). */
  get switching(): boolean {
    return this.policy.kind !== 'agent';
  }

  get report(): string {
    return userReport(this.policy);
  }

  /** The user `attemptId` runs as, held until release(); null: the agent's own. Throws when the range has no uid left. */
  acquire(attemptId: string): AttemptUser | null {
    const had = this.held.get(attemptId);
    if (had) return had;
    const p = this.policy;
    if (p.kind === 'agent') return null;
    if (p.kind === 'run-as') return this.hold(attemptId, p.user);
    const listed = this.listedIds();
    for (let uid = lowest(this.idle); uid !== null; uid = lowest(this.idle)) {
      this.idle.delete(uid);
      // Its file is read again (no write): one reclaimed since (this agent's attempts/ removed by hand) is not ours to give.
      if (!listed.has(uid) && this.locks!.heldForUs(uid)) return this.hold(attemptId, { uid, gid: uid, name: null });
      // An account or group of that id since, or no longer ours: given back (drop() leaves another's file alone).
      this.giveBack(uid);
    }
    for (let uid = p.first; uid <= p.last; uid++) {
      if (this.inUse.has(uid) || listed.has(uid)) continue;
      if (this.locks!.tryTake(uid, FOR_THE_AGENT)) {
        this.pooled.add(uid);
        return this.hold(attemptId, { uid, gid: uid, name: null });
      }
    }
    throw new Error(
      `no free uid in --uid-range ${p.first}-${p.last}: ${this.inUse.size} held by this agent's attempts, the rest listed in ${this.host.passwdFile} or ${this.host.groupFile} or held by other agents of this host`,
    );
  }

  /**
   * An attempt a previous run of the agent started keeps the user it ran as: `owner`, the owner of
   * its work/ directory (given to its user before its command started). Null when that is the
   * agent's own (it never started as another), or a uid this policy would not hand out.
   */
  adopt(attemptId: string, owner: number): AttemptUser | null {
    const p = this.policy;
    if (p.kind === 'agent' || owner === this.host.agentUid) return null;
    if (p.kind === 'run-as') return owner === p.user.uid ? this.hold(attemptId, p.user) : null;
    if (owner < p.first || owner > p.last) return null;
    const holder = this.locks!.claim(owner, attemptId);
    if (holder)
      throw new Error(
        `uid ${owner} of attempt ${attemptId} is held by another agent (${holder.dataDir}, attempt ${holder.attemptId}); two agents on one data directory?`,
      );
    return this.hold(attemptId, { uid: owner, gid: owner, name: null });
  }

  /**
   * After adopting what it recovered: the uids a previous run of this agent held for anything
   * else go back, and so do those held for agents that are gone for good (uid-locks.ts: the
   * attempt's directory is gone, and no process runs as the uid). The uids freed.
   */
  forgetOthers(): number[] {
    if (!this.locks) return [];
    const dropped: number[] = [];
    for (const { uid, attemptId } of this.locks.ours()) {
      // This run's: adopted, or taken for an attempt started since.
      if (this.held.get(attemptId)?.uid === uid || this.pooled.has(uid)) continue;
      this.locks.drop(uid, attemptId);
      dropped.push(uid);
    }
    const gone = (uid: number, h: UidHolder) => !existsSync(join(h.dataDir, 'attempts', h.attemptId)) && !this.host.runsAs(uid);
    return [...dropped, ...this.locks.reclaimOrphans(gone)];
  }

  /** The attempt is settled: its uid may go to the next. Harmless for an attempt that holds none. */
  release(attemptId: string): void {
    const u = this.held.get(attemptId);
    if (!u) return;
    this.held.delete(attemptId);
    if (this.policy.kind !== 'dynamic') return;
    this.inUse.delete(u.uid);
    // Kept for the next attempt when its file names the agent; one adopted after a restart names its attempt, and goes.
    if (this.pooled.has(u.uid)) this.idle.add(u.uid);
    else this.locks!.drop(u.uid, attemptId);
  }

  /** The agent stops: its idle uids go back to the host (those its attempts left running keep theirs, for its next start). */
  close(): void {
    for (const uid of this.idle) this.giveBack(uid);
    this.idle.clear();
  }

  /** A uid taken for the agent no longer kept: its file removed, if it still names this agent for no attempt. */
  private giveBack(uid: number): void {
    this.pooled.delete(uid);
    this.locks!.drop(uid, FOR_THE_AGENT);
  }

  /** The user an attempt holds, if any. */
  of(attemptId: string): AttemptUser | null {
    return this.held.get(attemptId) ?? null;
  }

  private hold(attemptId: string, u: AttemptUser): AttemptUser {
    this.held.set(attemptId, u);
    if (this.policy.kind === 'dynamic') this.inUse.add(u.uid);
    return u;
  }

  private listedIds(): Set<number> {
    const mark = `${fileMark(this.host.passwdFile)}|${fileMark(this.host.groupFile)}`;
    if (mark !== this.listed.mark) {
      const ids = new Set(readGroupIds(this.host.groupFile));
      for (const e of readPasswd(this.host.passwdFile)) ids.add(e.uid).add(e.gid);
      this.listed = { mark, ids };
    }
    return this.listed.ids;
  }
}

/** The smallest of a few numbers (a pool the size of the agent's slots at most); null when none. */
function lowest(set: Set<number>): number | null {
  let min: number | null = null;
  for (const n of set) if (min === null || n < min) min = n;
  return min;
}
