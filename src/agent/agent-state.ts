/**
 * The agent's own record on disk, so that after the agent crashes (or the host reboots) it can
 * still deliver outcomes the server has not heard. Layout under the data dir:
 *
 *   agent.json                         { name, machineId }
 *   attempts/<attemptId>/assignment.json   the assignment as received, token included
 *                        work/            the command's cwd
 *                        output/          GANTRY_OUTPUT_DIR
 *                        input/<stage>/   GANTRY_INPUT_DIR/<stage>: upstream outputs
 *                        stdout.log, stderr.log  what the command wrote (it writes them itself);
 *                                         the log is shipped from them, at byte offsets
 *                        status           the command's exit status, written by its shim when it ends
 *                        pid              { pid, bootId, startTime } written right after spawn
 *                        exit.json        { exitCode, signal, reason, finishedAt, attempt }, durable
 *                                         before the outcome is reported
 *                        reported.json    written once nothing more is owed to the server
 *
 * An attempt directory without reported.json is owed something: with exit.json, its outcome;
 * without, it was running (or about to) when the agent died, and its outcome is unknowable.
 *
 * What is fsynced, and why only that: every file is written whole (temporary file, rename), so a
 * crash of the agent alone loses nothing (the kernel's page cache outlives the process). Only
 * exit.json is also fsynced (file and directory): it is the one record a crash of the host must
 * not lose, since the outcome is reported from it, and it carries the attempt's id and token so
 * that it can be reported without any other file. The others are not: after a crash of the host
 * no attempt's process survives, so a lost assignment.json or pid record leaves nothing running to
 * find or kill (the server reaps the attempt as lost), and a lost reported.json only means the
 * outcome is sent again, which the server answers `duplicate` or `stale`. Per attempt that is one
 * fsync pair instead of four. The records that are not fsynced, and the directories, are written
 * synchronously (see write-file-atomic.ts for why); removals are not (see removeAttemptDir).
 */
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, rmdir, unlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import { processGroupAlive } from './process-group.js';
import { spreadDirectories } from './spread-directories.js';
import { writeFileAtomic, writeFileWhole } from './write-file-atomic.js';

export interface AgentIdentity {
  name: string;
  machineId: string;
}

/** What identifies an attempt to the server and to a person reading the log. */
export type AttemptIdentity = Pick<AssignmentWire, 'attemptId' | 'token' | 'jobId' | 'stageName' | 'attemptNumber'>;

export interface ExitRecord {
  exitCode: number | null;
  signal: string | null;
  reason: string | null;
  finishedAt: string;
  /** Enough to report the outcome should assignment.json (not fsynced) be lost with the host; absent in records of older agents. */
  attempt?: AttemptIdentity;
  /** Set when the agent had stopped caring before the exit was recorded (see Run.dropped): nothing is reported. */
  dropped?: string;
}

/**
 * How an attempt stopped being owed to the server. `dropped`: the server had already decided
 * (kill, stale token) or will (lease lost, agent stopped), so nothing was sent. `abandoned`: the
 * agent died while it ran; the server reaps it as lost.
 */
export type ReportResult = 'accepted' | 'duplicate' | 'stale' | 'dropped' | 'abandoned';

export interface ReportedRecord {
  result: ReportResult;
  at: string;
  jobState?: string;
  note?: string;
}

/**
 * Enough to tell, after a restart, whether a live process group with this id is still ours: pid
 * numbers are reused, across a reboot certainly, and within one boot once the group is gone.
 */
export interface PidRecord {
  pid: number;
  bootId: string | null;
  startTime: string | null;
}

export interface FinishedAttempt {
  assignment: AssignmentWire;
  exit: ExitRecord;
}

export interface InterruptedAttempt {
  assignment: AssignmentWire;
  pid: PidRecord | null;
}

export interface AttemptPaths {
  dir: string;
  assignment: string;
  work: string;
  output: string;
  input: string;
  stdout: string;
  stderr: string;
  /** The command's exit status, written by the shim that runs it (process-runner.ts). */
  status: string;
  pid: string;
  exit: string;
  reported: string;
}

/** Attempt ids become directory names: anything that could climb out of attempts/ is refused. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

export const KEEP_REPORTED = 50;

export class AgentState {
  readonly dataDir: string;
  /**
   * Settled attempts (reported.json written), oldest first: what prune() removes, without reading
   * any file. Seeded by scan() from the directories a previous run left; a Set keeps insertion
   * order and ignores an attempt settled twice.
   */
  private readonly settled = new Set<string>();

  constructor(dataDir: string) {
    this.dataDir = resolve(dataDir);
  }

  private get attemptsDir(): string {
    return join(this.dataDir, 'attempts');
  }

  async init(): Promise<void> {
    await mkdir(this.attemptsDir, { recursive: true });
    await spreadDirectories(this.attemptsDir);
  }

  async readIdentity(): Promise<AgentIdentity | null> {
    return readJson<AgentIdentity>(join(this.dataDir, 'agent.json'));
  }

  async writeIdentity(id: AgentIdentity): Promise<void> {
    await writeJson(join(this.dataDir, 'agent.json'), id);
  }

  paths(attemptId: string): AttemptPaths {
    if (!SAFE_ID.test(attemptId)) throw new Error(`attempt id "${attemptId}" cannot name a directory`);
    const dir = join(this.attemptsDir, attemptId);
    return {
      dir,
      assignment: join(dir, 'assignment.json'),
      work: join(dir, 'work'),
      output: join(dir, 'output'),
      input: join(dir, 'input'),
      stdout: join(dir, 'stdout.log'),
      stderr: join(dir, 'stderr.log'),
      status: join(dir, 'status'),
      pid: join(dir, 'pid'),
      exit: join(dir, 'exit.json'),
      reported: join(dir, 'reported.json'),
    };
  }

  /**
   * The attempt's directory, or null when it exists already: that attempt was handled before (the
   * same assignment sent again), and creating the directory is the check, with no file read.
   * Directories first, assignment.json last: an attempt with an assignment has its directories.
   * Not fsynced (see the top of this file).
   */
  async createAttempt(a: AssignmentWire): Promise<AttemptPaths | null> {
    const p = this.paths(a.attemptId);
    try {
      mkdirSync(p.dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') return null;
      if (code !== 'ENOENT') throw err;
      // attempts/ itself is gone (removed by hand while the agent ran).
      mkdirSync(p.dir, { recursive: true });
    }
    for (const d of [p.work, p.output, p.input]) mkdirSync(d);
    writeJsonWhole(p.assignment, a);
    return p;
  }

  async removeAttempt(attemptId: string): Promise<void> {
    await removeAttemptDir(this.paths(attemptId));
  }

  async readAssignment(attemptId: string): Promise<AssignmentWire | null> {
    return readJson<AssignmentWire>(this.paths(attemptId).assignment);
  }

  /** Not fsynced: a crash of the host leaves no process to find by it. */
  async writePid(attemptId: string, pid: number): Promise<void> {
    const rec: PidRecord = { pid, bootId: bootId(), startTime: processStartTime(pid) };
    writeJsonWhole(this.paths(attemptId).pid, rec);
  }

  async readPid(attemptId: string): Promise<PidRecord | null> {
    return readJson<PidRecord>(this.paths(attemptId).pid);
  }

  /** Fsynced: the outcome is reported from this record, after a crash of the host too. */
  async writeExit(attemptId: string, exit: ExitRecord): Promise<void> {
    await writeJson(this.paths(attemptId).exit, exit);
  }

  async readExit(attemptId: string): Promise<ExitRecord | null> {
    return readJson<ExitRecord>(this.paths(attemptId).exit);
  }

  /** Not fsynced: if a crash of the host loses it, the outcome is sent again and answered `duplicate` or `stale`. */
  async markReported(attemptId: string, rec: ReportedRecord): Promise<void> {
    writeJsonWhole(this.paths(attemptId).reported, rec);
    this.settled.add(attemptId);
  }

  async readReported(attemptId: string): Promise<ReportedRecord | null> {
    return readJson<ReportedRecord>(this.paths(attemptId).reported);
  }

  /**
   * What a freshly started agent owes the server: outcomes recorded but not delivered, attempts
   * that were running when the agent went down, and directories without any record (the agent
   * died while creating them: nothing ran). Directories that cannot be read are returned apart so
   * one damaged attempt does not stop the agent. Also learns which attempts are settled, oldest
   * first, for prune(): the one time the agent reads every reported.json.
   */
  async scan(): Promise<{
    finished: FinishedAttempt[];
    interrupted: InterruptedAttempt[];
    incomplete: string[];
    broken: { attemptId: string; error: string }[];
  }> {
    const finished: FinishedAttempt[] = [];
    const interrupted: InterruptedAttempt[] = [];
    const incomplete: string[] = [];
    const broken: { attemptId: string; error: string }[] = [];
    const settled: { id: string; at: string }[] = [];
    for (const id of await this.attemptIds()) {
      try {
        // Unreadable (cut short by a crash of the host: it is not fsynced) counts as not written.
        const rec = await this.readReported(id).catch(() => null);
        if (rec) {
          settled.push({ id, at: String(rec.at) });
          continue;
        }
        const exit = await this.readExit(id);
        // assignment.json and pid are written whole (tmp + rename) but not fsynced: unreadable
        // means cut short by a crash of the host, which no process of the attempt survived. With
        // exit.json (fsynced) the outcome can still be reported; without it nothing is owed.
        let assignment = await this.readAssignment(id).catch(() => null);
        if (!assignment && exit?.attempt) assignment = fromIdentity(exit.attempt);
        if (!assignment) incomplete.push(id);
        else if (exit) finished.push({ assignment, exit });
        else interrupted.push({ assignment, pid: await this.readPid(id).catch(() => null) });
      } catch (err) {
        broken.push({ attemptId: id, error: (err as Error).message });
      }
    }
    settled.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
    for (const s of settled) this.settled.add(s.id);
    return { finished, interrupted, incomplete, broken };
  }

  /**
   * Removes settled attempts beyond the newest `keep`, which stay for a person to look at. O(1)
   * per attempt settled: the order is kept in memory, so no reported.json is read.
   */
  async prune(keep = KEEP_REPORTED): Promise<string[]> {
    const removed: string[] = [];
    // Taken out of the set before any await, so that concurrent calls never pick the same one.
    for (const id of this.settled) {
      if (this.settled.size <= keep) break;
      this.settled.delete(id);
      removed.push(id);
    }
    for (const id of removed) await removeAttemptDir(this.paths(id));
    return removed;
  }

  async attemptIds(): Promise<string[]> {
    try {
      return (await readdir(this.attemptsDir, { withFileTypes: true })).filter((d) => d.isDirectory() && SAFE_ID.test(d.name)).map((d) => d.name);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }
}

/**
 * Whether the process group recorded in `rec` is still alive and still the one this agent
 * started. A group whose leader is gone but whose members live cannot have had its id reused,
 * so only a living leader with a different start time, or another boot, rules it out.
 */
export function survivingGroup(rec: PidRecord): boolean {
  if (!processGroupAlive(rec.pid)) return false;
  const boot = bootId();
  if (rec.bootId !== null && boot !== null && rec.bootId !== boot) return false;
  const start = processStartTime(rec.pid);
  if (rec.startTime !== null && start !== null && start !== rec.startTime) return false;
  return true;
}

/** Read once: it changes only with a reboot, and this process does not outlive one. */
let cachedBootId: string | null | undefined;

function bootId(): string | null {
  if (cachedBootId !== undefined) return cachedBootId;
  try {
    cachedBootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    cachedBootId = null;
  }
  return cachedBootId;
}

/** Field 22 of /proc/<pid>/stat: start time in clock ticks since boot (Linux only). */
function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

async function readJson<T>(path: string): Promise<T | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  return JSON.parse(text) as T;
}

/**
 * The layout the agent made is removed by name, one system call per entry and nothing read (a
 * recursive removal stats and lists every entry first); only when something else is there (what
 * the command left in work/ or output/, inputs, a temporary file from a crash) does a recursive
 * removal walk it. Off the event loop: freeing blocks can wait for the disk (discards).
 */
async function removeAttemptDir(p: AttemptPaths): Promise<void> {
  const gone = (err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  };
  try {
    await Promise.all([p.assignment, p.pid, p.exit, p.reported, p.stdout, p.stderr, p.status].map((f) => unlink(f).catch(gone)));
    await Promise.all([rmdir(p.work).catch(gone), rmdir(p.output).catch(gone), removeInputDirs(p.input).catch(gone)]);
    await rmdir(p.dir).catch(gone);
  } catch {
    await rm(p.dir, { recursive: true, force: true });
  }
}

/**
 * input/ holds one directory per upstream stage, empty when the upstream left no files (the
 * common case): removed one by one, without the stat of every entry a recursive removal makes.
 * Anything else there (downloaded files) makes it throw, and the caller removes recursively.
 */
async function removeInputDirs(input: string): Promise<void> {
  try {
    await rmdir(input);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOTEMPTY') throw err;
    await Promise.all((await readdir(input)).map((d) => rmdir(join(input, d))));
    await rmdir(input);
  }
}

async function writeJson(path: string, value: unknown): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(value, null, 2) + '\n');
}

function writeJsonWhole(path: string, value: unknown): void {
  writeFileWhole(path, JSON.stringify(value, null, 2) + '\n');
}

/** An assignment rebuilt from an exit record, when assignment.json was lost: enough to report the outcome, nothing to run. */
function fromIdentity(id: AttemptIdentity): AssignmentWire {
  return { ...id, command: [], env: {}, gpuIndices: [], timeoutSeconds: null, inputs: [] };
}


/**
 * Process groups whose leader carries GANTRY_ATTEMPT_ID=<attemptId> in its environment (Linux,
 * /proc): how to find an attempt's processes when the agent died before recording the pid.
 */
export function groupsOfAttempt(attemptId: string): number[] {
  const needle = `GANTRY_ATTEMPT_ID=${attemptId}\0`;
  const out: number[] = [];
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return out;
  }
  for (const pid of pids) {
    try {
      if (!`${readFileSync(`/proc/${pid}/environ`, 'latin1')}\0`.includes(needle)) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const pgid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
      if (pgid > 0 && !out.includes(pgid)) out.push(pgid);
    } catch {
      // gone, or not ours to read
    }
  }
  return out;
}
