/**
 * The agent's own record on disk, so that after the agent crashes (or the host reboots) it can
 * still deliver outcomes the server has not heard. Layout under the data dir:
 *
 *   agent.json                  { name, machineId }
 *   attempts.journal            every attempt's records, one JSON line each (attempt-journal.ts):
 *                               assignment, pid, exit (durable before the outcome is reported),
 *                               reported (nothing more is owed to the server), removed
 *   attempts/<attemptId>/work/            the command's cwd
 *                        output/          GANTRY_OUTPUT_DIR
 *                        input/<stage>/   GANTRY_INPUT_DIR/<stage>: upstream outputs
 *                        stdout.log, stderr.log  what the command wrote (it writes them itself);
 *                                         the log is shipped from them, at byte offsets, and they
 *                                         are removed once the server has it all (removeLogs)
 *                        status           the command's exit status, written by its shim when it ends
 *                        progress.jsonl   GANTRY_PROGRESS_FILE (made by the agent when the attempt
 *                                         runs as a user of its own: attempt-owner.ts)
 *   attempts/.spare.<n>/        directories of settled attempts, emptied, kept for the next ones
 *
 * Who owns what when attempts run as users of their own (work/, output/, input/ theirs; the rest
 * the agent's; the attempt's directory open to pass through only while its command runs):
 * attempt-owner.ts. Whatever the agent walks, empties or removes in them, it does without
 * following a link (stage-tree.ts): a stage can leave links there.
 *
 * An attempt with no reported record is owed something: with an exit record, its outcome;
 * without, it was running (or about to) when the agent died, and its outcome is unknowable.
 *
 * What is synced, and why only that: only exit records are (fdatasync of the journal, shared by
 * the exits that end together): an exit is the one record a crash of the host must not lose, since
 * the outcome is reported from it, and it carries the attempt's id and token so that it can be
 * reported without any other record. After a crash of the host no attempt's process survives, so a
 * lost assignment or pid leaves nothing running to find or kill (the server reaps the attempt as
 * lost), and a lost reported mark only means the outcome is sent again, which the server answers
 * `duplicate` or `stale`.
 *
 * Directories are recycled: a settled attempt's directory, once emptied (the command left nothing
 * in work/ or output/, its empty logs stay), is renamed aside and renamed into place for the next
 * attempt: two renames instead of four mkdirs and four rmdirs, each a journaled metadata change of
 * the filesystem (together with the separate record files this replaced, a fifth of the agent's
 * time under load, measured). An agent whose previous version kept records as files
 * (assignment.json, pid, exit.json, reported.json in the attempt's directory) still reads them.
 */
import { randomBytes } from 'node:crypto';
import { uptime } from 'node:os';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmdirSync, statSync, unlinkSync } from 'node:fs';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import { checkPathSegment } from './check-relative-path.js';
import { AttemptJournal, type AttemptIdentity, type AttemptRecords, type ExitRecord, type PidRecord, type ReportedRecord } from './attempt-journal.js';
import { processGroupAlive } from '../attempt/process-group.js';
import { spreadDirectories } from './spread-directories.js';
import { writeFileAtomic } from './write-file-atomic.js';
import { closeAttemptDir } from './attempt-owner.js';
import { removeStageTree } from './stage-tree.js';
import { errorText } from '../../lib/error-text.js';
import type { CgroupRef } from '../contain/attempt-cgroup.js';
import { privateMode } from '../../lib/private-mode.js';
import { procPids } from '../attempt/proc-pids.js';

export type { ExitRecord, PidRecord, ReportedRecord } from './attempt-journal.js';

export interface AgentIdentity {
  name: string;
  machineId: string;
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
  work: string;
  output: string;
  input: string;
  stdout: string;
  stderr: string;
  /** The command's exit status, written by the shim that runs it (process-runner.ts). */
  status: string;
  /** GANTRY_PROGRESS_FILE: where the stage may say how far it has come (stage-progress.ts). */
  progress: string;
}

/** Attempt ids become directory names: anything that could climb out of attempts/ is refused. */
const SAFE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
const SPARE_PREFIX = '.spare.';
/** Emptied directories kept for reuse: about one per slot is enough to never make one anew. */
const MAX_SPARES = 64;
/** What a settled attempt's directory may hold and still be reused once emptied. */
const LAYOUT = new Set(['work', 'output', 'input', 'stdout.log', 'stderr.log', 'status', 'progress.jsonl']);

export const KEEP_REPORTED = 50;

export class AgentState {
  readonly dataDir: string;
  private readonly journal: AttemptJournal;
  /**
   * Settled attempts (reported), oldest first: what prune() removes, without reading anything.
   * Seeded by scan() from the records a previous run left; a Set keeps insertion order and
   * ignores an attempt settled twice.
   */
  private readonly settled = new Set<string>();
  /**
   * Emptied directories, by the upstream stages their input/ has a directory for (sorted, one per
   * line): a stage's next attempt, or another stage after the same upstreams, finds its input/
   * laid out already (creating and removing a directory cost more than anything else here).
   */
  private readonly spares = new Map<string, string[]>();
  private spareCount = 0;
  private spareSeq = 0;
  /** Not the pid alone: in a container the agent can have the same pid at every start, and a previous run's spares are kept. */
  private readonly spareTag = `${process.pid}.${randomBytes(3).toString('hex')}`;
  /**
   * Attempts run as users of their own (attempt-owner.ts): a settled attempt's directory is closed
   * (0700) before its uid can go to another. Set by the agent before anything runs.
   */
  closeSettled = false;

  constructor(dataDir: string, opts: { onJournalError?: (err: unknown) => void } = {}) {
    this.dataDir = resolve(dataDir);
    this.journal = new AttemptJournal(this.dataDir, opts.onJournalError ? { onCompactionError: opts.onJournalError } : {});
  }

  private get attemptsDir(): string {
    return join(this.dataDir, 'attempts');
  }

  async init(): Promise<void> {
    await mkdir(this.attemptsDir, { recursive: true });
    await spreadDirectories(this.attemptsDir);
    // Spares left by the previous run were emptied before they were renamed aside.
    for (const name of readdirSync(this.attemptsDir)) {
      if (!name.startsWith(SPARE_PREFIX)) continue;
      const path = join(this.attemptsDir, name);
      let key: string | null = null;
      try {
        if (this.spareCount < MAX_SPARES) key = inputKey(readdirSync(join(path, 'input')));
      } catch {
        // Not laid out as a spare: removed.
      }
      if (key === null) void removeStageTree(path).catch(() => {});
      else this.keepSpare(key, path);
    }
  }

  async readIdentity(): Promise<AgentIdentity | null> {
    return readJson<AgentIdentity>(join(this.dataDir, 'agent.json'));
  }

  async writeIdentity(id: AgentIdentity): Promise<void> {
    await writeFileAtomic(join(this.dataDir, 'agent.json'), JSON.stringify(id, null, 2) + '\n');
  }

  /** The machine's credential, from its last joining: readable by the agent's user only. */
  readCredential(): string | null {
    try {
      return readFileSync(join(this.dataDir, 'credential'), 'utf8').trim() || null;
    } catch {
      return null;
    }
  }

  async writeCredential(token: string): Promise<void> {
    await writeFileAtomic(join(this.dataDir, 'credential'), token + '\n', { mode: 0o600 });
  }

  paths(attemptId: string): AttemptPaths {
    if (!SAFE_ID.test(attemptId)) throw new Error(`attempt id "${attemptId}" cannot name a directory`);
    const dir = join(this.attemptsDir, attemptId);
    return {
      dir,
      work: join(dir, 'work'),
      output: join(dir, 'output'),
      input: join(dir, 'input'),
      stdout: join(dir, 'stdout.log'),
      stderr: join(dir, 'stderr.log'),
      status: join(dir, 'status'),
      progress: join(dir, 'progress.jsonl'),
    };
  }

  /**
   * The attempt's directory, or null when the attempt is known already: handled before (the same
   * assignment sent again). Directory first, record last: an attempt with an assignment record has
   * its directory. Nothing synced (see the top of this file).
   */
  async createAttempt(a: AssignmentWire): Promise<AttemptPaths | null> {
    const p = this.paths(a.attemptId);
    if (this.journal.get(a.attemptId) || existsSync(p.dir)) return null;
    if (!(await this.reuseSpare(p, inputKey(a.inputs.map((i) => i.stage))))) {
      try {
        mkdirSync(p.dir);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'EEXIST') return null;
        if (code !== 'ENOENT') throw err;
        // attempts/ itself is gone (removed by hand while the agent ran).
        mkdirSync(p.dir, { recursive: true });
      }
      // On the way to its own directories for a stage running as a user of its own (lib/private-mode.ts); a spare kept its mode.
      chmodSync(p.dir, privateMode('attempt-dir'));
      for (const d of [p.work, p.output, p.input]) mkdirSync(d, { mode: privateMode('attempt-own-dir') });
    }
    this.journal.append(a.attemptId, 'assignment', a, Date.now());
    return p;
  }

  /**
   * Removes an attempt's log files once the server has every byte of them and nothing more is owed
   * (the runner knows: log-tail.ts): what a stage printed, a secret it echoed included, is then kept
   * in one place, the server's, rather than also on every machine it ran on for as long as its
   * directory is kept (KEEP_REPORTED). An empty file stays: it holds nothing, and a spare's next
   * attempt appends to it rather than creating one. Before then never: an agent restarted mid-ship
   * goes on from the server's offsets in these files.
   */
  removeLogs(attemptId: string): void {
    const p = this.paths(attemptId);
    for (const log of [p.stdout, p.stderr]) if ((statSync(log, { throwIfNoEntry: false })?.size ?? 0) > 0) unlinkQuiet(log);
  }

  async removeAttempt(attemptId: string): Promise<void> {
    await this.dispose(attemptId);
  }

  /**
   * The recycled cgroup an attempt is about to run in (cgroup-tree.ts): appended before its
   * command starts, so that a restart re-attaches to the right one and subtracts its baseline.
   * Not synced, as the assignment is not: after a crash of the host nothing of it runs.
   */
  recordCgroup(attemptId: string, ref: CgroupRef): void {
    this.journal.append(attemptId, 'cgroup', ref);
  }

  /** The recycled cgroup recorded for an attempt; null: its own (named after it), or none. */
  cgroupOf(attemptId: string): CgroupRef | null {
    return this.journal.get(attemptId)?.cgroup ?? null;
  }

  async readAssignment(attemptId: string): Promise<AssignmentWire | null> {
    return this.journal.get(attemptId)?.assignment ?? null;
  }

  /**
   * Not synced: a crash of the host leaves no process to find by it. The uptime, not the process's
   * start time: reading /proc/<pid>/stat of a process just spawned cost 0.25–0.35 ms of CPU (the
   * agent's largest cost a stage, measured), the uptime nothing; the check after a restart reads
   * the start time then, once. `startTime: null` tells an older agent, should one read this
   * journal, that the start time is unknown (it then checks the boot alone) rather than different.
   */
  async writePid(attemptId: string, pid: number): Promise<void> {
    this.journal.append(attemptId, 'pid', { pid, bootId: bootId(), startTime: null, recordedAtUptime: uptimeNow(), at: Date.now() } satisfies PidRecord);
  }

  async readPid(attemptId: string): Promise<PidRecord | null> {
    return this.journal.get(attemptId)?.pid ?? null;
  }

  /** Synced: the outcome is reported from this record, after a crash of the host too. */
  async writeExit(attemptId: string, exit: ExitRecord): Promise<void> {
    this.journal.append(attemptId, 'exit', exit);
    await this.journal.durable();
  }

  async readExit(attemptId: string): Promise<ExitRecord | null> {
    return this.journal.get(attemptId)?.exit ?? null;
  }

  /** Not synced: if a crash of the host loses it, the outcome is sent again and answered `duplicate` or `stale`. */
  async markReported(attemptId: string, rec: ReportedRecord): Promise<void> {
    this.journal.append(attemptId, 'reported', rec);
    this.settled.add(attemptId);
    if (this.closeSettled) closeAttemptDir(this.paths(attemptId).dir);
  }

  async readReported(attemptId: string): Promise<ReportedRecord | null> {
    return this.journal.get(attemptId)?.reported ?? null;
  }

  /**
   * What a freshly started agent owes the server: outcomes recorded but not delivered, attempts
   * that were running when the agent went down, and directories without any record (the agent
   * died while creating them: nothing ran). Damaged lines of the journal, and directories of an
   * older agent that cannot be read, are returned apart so that they do not stop the agent. Also
   * learns which attempts are settled, oldest first, for prune().
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
    const settled: { id: string; at: string }[] = [];
    this.journal.load();
    const broken = this.journal.broken.map((b) => ({ attemptId: `(${this.journal.path}, line ${b.line})`, error: b.error }));
    const dirs = new Set(await this.attemptIds());
    // Records whose directory was removed by hand: nothing to run or to ship a log from.
    for (const id of this.journal.ids()) if (!dirs.has(id) && !this.journal.get(id)?.exit) this.journal.append(id, 'removed');
    for (const id of dirs) {
      let rec: AttemptRecords | undefined = this.journal.get(id);
      if (!rec) {
        try {
          rec = await readLegacy(join(this.attemptsDir, id));
        } catch (err) {
          broken.push({ attemptId: id, error: errorText(err) });
          continue;
        }
      }
      if (rec.reported) {
        settled.push({ id, at: String(rec.reported.at) });
        continue;
      }
      // The exit record carries what is needed to report the outcome, should the assignment be lost.
      const assignment = rec.assignment ?? (rec.exit?.attempt ? fromIdentity(rec.exit.attempt) : null);
      if (!assignment) incomplete.push(id);
      else if (rec.exit) finished.push({ assignment, exit: rec.exit });
      else interrupted.push({ assignment, pid: rec.pid ?? null });
    }
    settled.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
    for (const s of settled) this.settled.add(s.id);
    return { finished, interrupted, incomplete, broken };
  }

  /**
   * Removes settled attempts beyond the newest `keep`, which stay for a person to look at. O(1)
   * per attempt settled: the order is kept in memory, so no record is read.
   */
  async prune(keep = KEEP_REPORTED): Promise<string[]> {
    const removed: string[] = [];
    // Taken out of the set before any await, so that concurrent calls never pick the same one.
    for (const id of this.settled) {
      if (this.settled.size <= keep) break;
      this.settled.delete(id);
      removed.push(id);
    }
    for (const id of removed) await this.dispose(id);
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

  /**
   * Forgets the attempt, then empties its directory and keeps it for another, or removes it. The
   * record goes first: a crash in between leaves a directory with no record, which the next start
   * removes as incomplete.
   */
  private async dispose(attemptId: string): Promise<void> {
    const p = this.paths(attemptId);
    const rec = this.journal.get(attemptId);
    if (rec) this.journal.append(attemptId, 'removed');
    // Only a directory laid out by this agent is reused (an older agent's, with its record files, is removed).
    const assignment = rec?.assignment;
    const key = assignment && this.spareCount < MAX_SPARES ? emptied(p) : null;
    if (key !== null) {
      const spare = join(this.attemptsDir, `${SPARE_PREFIX}${this.spareTag}.${++this.spareSeq}`);
      try {
        renameSync(p.dir, spare);
        this.keepSpare(key, spare);
        return;
      } catch {
        // Fall through: removed instead.
      }
    }
    await removeStageTree(p.dir);
  }

  private keepSpare(key: string, path: string): void {
    const list = this.spares.get(key);
    if (list) list.push(path);
    else this.spares.set(key, [path]);
    this.spareCount++;
  }

  /**
   * Renames a spare into place: one laid out for these upstreams if there is one, else any, whose
   * input/ is then emptied (downloadInputs makes the directories the attempt needs).
   */
  private async reuseSpare(p: AttemptPaths, key: string): Promise<boolean> {
    for (;;) {
      const picked = this.pickSpares(key);
      if (!picked) return false;
      const [k, list] = picked;
      const spare = list.pop()!;
      if (list.length === 0) this.spares.delete(k);
      this.spareCount--;
      try {
        renameSync(spare, p.dir);
        if (k !== key) relayInputs(p.input, k, key);
        return true;
      } catch {
        // Removed by hand (try the next), or its input/ not as it should be (gone before the next try).
        await removeStageTree(p.dir);
      }
    }
  }

  private pickSpares(key: string): [string, string[]] | null {
    for (const k of [key, '']) {
      const list = this.spares.get(k);
      if (list) return [k, list];
    }
    return this.spares.entries().next().value ?? null;
  }
}

/**
 * Empties a settled attempt's directory down to its layout, if what the command left there is
 * only its logs, and answers which upstreams its input/ is laid out for; null (and nothing lost
 * but the status) when anything else is there. Empty logs and input directories stay, for the
 * next attempt; the status must go, or the next attempt would read as ended.
 */
function emptied(p: AttemptPaths): string | null {
  try {
    // work/, output/ and input/ are named in the agent's directory (the stage cannot swap them);
    // what input/ holds is the stage's: only real directories count (a link is not looked into).
    for (const name of readdirSync(p.dir)) if (!LAYOUT.has(name)) return null;
    if (readdirSync(p.work).length > 0 || readdirSync(p.output).length > 0) return null;
    const entries = readdirSync(p.input, { withFileTypes: true });
    if (entries.some((e) => !e.isDirectory())) return null;
    const stages = entries.map((e) => e.name);
    for (const stage of stages) if (readdirSync(join(p.input, stage)).length > 0) return null;
    unlinkQuiet(p.status);
    unlinkQuiet(p.progress);
    for (const log of [p.stdout, p.stderr]) if ((statSync(log, { throwIfNoEntry: false })?.size ?? 0) > 0) unlinkSync(log);
    return inputKey(stages);
  } catch {
    return null;
  }
}

/**
 * Lays out an emptied input/ for other upstreams: a directory that is there and not wanted is
 * renamed to one that is wanted and not there (a rename is cheaper than a removal and a
 * creation), the rest removed; what is still missing downloadInputs makes.
 */
function relayInputs(input: string, from: string, to: string): void {
  const have = from ? from.split('\n') : [];
  const want = new Set(to ? to.split('\n') : []);
  const missing = [...want].filter((s) => !have.includes(s));
  for (const stage of have) {
    if (want.has(stage)) continue;
    const into = missing.pop();
    if (into !== undefined) renameSync(join(input, stage), join(input, checkPathSegment(into)));
    else rmdirSync(join(input, stage));
  }
}

/** Which upstream stages an input/ directory is laid out for. */
function inputKey(stages: string[]): string {
  return [...new Set(stages)].sort().join('\n');
}

function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/**
 * An older agent's records. Those it did not fsync (all but exit.json) may have been cut short by a
 * crash of the host: unreadable counts as not written. An unreadable exit.json throws.
 */
async function readLegacy(dir: string): Promise<AttemptRecords> {
  const soft = <T>(p: Promise<T | null>) => p.catch(() => null);
  const [assignment, pid, exit, reported] = await Promise.all([
    soft(readJson<AssignmentWire>(join(dir, 'assignment.json'))),
    soft(readJson<PidRecord>(join(dir, 'pid'))),
    readJson<ExitRecord>(join(dir, 'exit.json')),
    soft(readJson<ReportedRecord>(join(dir, 'reported.json'))),
  ]);
  const rec: AttemptRecords = {};
  if (assignment) rec.assignment = assignment;
  if (pid) rec.pid = { ...pid, at: pid.at ?? statSync(join(dir, 'pid'), { throwIfNoEntry: false })?.mtimeMs };
  if (exit) rec.exit = exit;
  if (reported) rec.reported = reported;
  return rec;
}

/**
 * Whether the process group recorded in `rec` is still alive and still the one this agent
 * started. A group whose leader is gone but whose members live cannot have had its id reused,
 * so only a living leader that started after the record was written (or, in an older agent's
 * record, at another time than recorded), or another boot, rules it out. Two processes never hold
 * one pid at once: a live process with this pid that started before the record was written is the
 * one recorded, unless ours had already ended and its pid been taken again before the record,
 * a window reading the start time at the record would have had as well.
 */
export function survivingGroup(rec: PidRecord): boolean {
  if (!processGroupAlive(rec.pid)) return false;
  const boot = bootId();
  if (rec.bootId !== null && boot !== null && rec.bootId !== boot) return false;
  const start = processStartTime(rec.pid);
  if (start === null) return true;
  if (rec.startTime !== undefined && rec.startTime !== null) return start === rec.startTime;
  // Both in hundredths of a second since boot (the kernel's clock ticks and its uptime), each cut
  // down: a process that started before the record cannot read as later, so no slack is needed
  // beyond one tick for the two clocks' rounding.
  if (rec.recordedAtUptime !== undefined) return Number(start) / CLOCK_TICKS_PER_SECOND <= rec.recordedAtUptime + 1 / CLOCK_TICKS_PER_SECOND;
  return true;
}

/**
 * The machine's uptime in seconds, as `os.uptime()` says, read from the system at most once a
 * second and counted on from there with the monotonic clock: `os.uptime()` reads /proc/uptime
 * (35 µs of CPU a call here, measured), once a stage. Both tick through the same time but a suspend,
 * which the next read catches up with; off by less than its 10 ms resolution otherwise, which
 * survivingGroup's one tick of slack covers.
 */
function uptimeNow(): number {
  const mono = performance.now();
  if (uptimeAnchor === null || mono - uptimeAnchor.mono >= 1000) uptimeAnchor = { uptime: uptime(), mono };
  return uptimeAnchor.uptime + (mono - uptimeAnchor.mono) / 1000;
}
let uptimeAnchor: { uptime: number; mono: number } | null = null;

/** Linux's USER_HZ, the unit of /proc/<pid>/stat's start time: 100 on every architecture Node runs on. */
const CLOCK_TICKS_PER_SECOND = 100;

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
  for (const pid of procPids() ?? []) {
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
