/**
 * The agent's own record on disk, so that after the agent crashes (or the host reboots) it can
 * still deliver outcomes the server has not heard. Layout under the data dir:
 *
 *   agent.json                         { name, machineId }
 *   attempts/<attemptId>/assignment.json   the assignment as received, token included
 *                        work/            the command's cwd
 *                        output/          GANTRY_OUTPUT_DIR
 *                        input/<stage>/   GANTRY_INPUT_DIR/<stage>: upstream outputs
 *                        stdout-stderr.log
 *                        pid              { pid, bootId, startTime } written right after spawn
 *                        exit.json        { exitCode, signal, reason, finishedAt }, durable before
 *                                         the outcome is reported
 *                        reported.json    written once nothing more is owed to the server
 *
 * An attempt directory without reported.json is owed something: with exit.json, its outcome;
 * without, it was running (or about to) when the agent died, and its outcome is unknowable.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import { processGroupAlive } from './process-group.js';
import { writeFileAtomic } from './write-file-atomic.js';

export interface AgentIdentity {
  name: string;
  machineId: string;
}

export interface ExitRecord {
  exitCode: number | null;
  signal: string | null;
  reason: string | null;
  finishedAt: string;
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
  log: string;
  pid: string;
  exit: string;
  reported: string;
}

/** Attempt ids become directory names: anything that could climb out of attempts/ is refused. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

export const KEEP_REPORTED = 50;

export class AgentState {
  readonly dataDir: string;

  constructor(dataDir: string) {
    this.dataDir = resolve(dataDir);
  }

  private get attemptsDir(): string {
    return join(this.dataDir, 'attempts');
  }

  async init(): Promise<void> {
    await mkdir(this.attemptsDir, { recursive: true });
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
      log: join(dir, 'stdout-stderr.log'),
      pid: join(dir, 'pid'),
      exit: join(dir, 'exit.json'),
      reported: join(dir, 'reported.json'),
    };
  }

  async hasAttempt(attemptId: string): Promise<boolean> {
    return (await readJson(this.paths(attemptId).assignment)) !== null;
  }

  /** Directories first, assignment.json last: an attempt with an assignment has its directories. */
  async createAttempt(a: AssignmentWire): Promise<AttemptPaths> {
    const p = this.paths(a.attemptId);
    for (const d of [p.work, p.output, p.input]) await mkdir(d, { recursive: true });
    await writeJson(p.assignment, a);
    return p;
  }

  async removeAttempt(attemptId: string): Promise<void> {
    await rm(this.paths(attemptId).dir, { recursive: true, force: true });
  }

  async readAssignment(attemptId: string): Promise<AssignmentWire | null> {
    return readJson<AssignmentWire>(this.paths(attemptId).assignment);
  }

  async writePid(attemptId: string, pid: number): Promise<void> {
    const rec: PidRecord = { pid, bootId: bootId(), startTime: processStartTime(pid) };
    await writeJson(this.paths(attemptId).pid, rec);
  }

  async readPid(attemptId: string): Promise<PidRecord | null> {
    return readJson<PidRecord>(this.paths(attemptId).pid);
  }

  async writeExit(attemptId: string, exit: ExitRecord): Promise<void> {
    await writeJson(this.paths(attemptId).exit, exit);
  }

  async readExit(attemptId: string): Promise<ExitRecord | null> {
    return readJson<ExitRecord>(this.paths(attemptId).exit);
  }

  async markReported(attemptId: string, rec: ReportedRecord): Promise<void> {
    await writeJson(this.paths(attemptId).reported, rec);
  }

  async readReported(attemptId: string): Promise<ReportedRecord | null> {
    return readJson<ReportedRecord>(this.paths(attemptId).reported);
  }

  /**
   * What a freshly started agent owes the server: outcomes recorded but not delivered, and
   * attempts that were running when the agent went down. Directories that cannot be read are
   * returned apart so one damaged attempt does not stop the agent.
   */
  async scan(): Promise<{ finished: FinishedAttempt[]; interrupted: InterruptedAttempt[]; broken: { attemptId: string; error: string }[] }> {
    const finished: FinishedAttempt[] = [];
    const interrupted: InterruptedAttempt[] = [];
    const broken: { attemptId: string; error: string }[] = [];
    for (const id of await this.attemptIds()) {
      try {
        if (await this.readReported(id)) continue;
        const assignment = await this.readAssignment(id);
        if (!assignment) continue; // died while creating it: nothing was started
        const exit = await this.readExit(id);
        if (exit) finished.push({ assignment, exit });
        else interrupted.push({ assignment, pid: await this.readPid(id) });
      } catch (err) {
        broken.push({ attemptId: id, error: (err as Error).message });
      }
    }
    return { finished, interrupted, broken };
  }

  /** Removes reported attempts beyond the newest `keep`, which stay for a person to look at. */
  async prune(keep = KEEP_REPORTED): Promise<string[]> {
    const done: { id: string; at: string }[] = [];
    for (const id of await this.attemptIds()) {
      const rec = await this.readReported(id).catch(() => null);
      if (rec) done.push({ id, at: rec.at });
    }
    done.sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0));
    const removed = done.slice(keep).map((d) => d.id);
    for (const id of removed) await rm(this.paths(id).dir, { recursive: true, force: true });
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

function bootId(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return null;
  }
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

async function writeJson(path: string, value: unknown): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(value, null, 2) + '\n');
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
