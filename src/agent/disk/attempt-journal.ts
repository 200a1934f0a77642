/**
 * The agent's records of its attempts, in one append-only file (`attempts.journal` in the data
 * directory), one JSON line per record:
 *
 *   {"id":"att_…","assignment":{…},"at":T}   the assignment as received, token included; T: when (ms)
 *   {"id":"att_…","cgroup":{…}}       { name, baseline }: a recycled cgroup it runs in, before the spawn
 *   {"id":"att_…","pid":{…}}          { pid, bootId, recordedAtUptime }, right after the spawn
 *   {"id":"att_…","exit":{…}}         how the command ended; durable before the outcome is reported
 *   {"id":"att_…","reported":{…}}     nothing more is owed to the server
 *   {"id":"att_…","removed":true}     the attempt's directory is gone (or going); forget it
 *
 * Why one file: as separate files (write to a temporary, rename, delete later), the four records
 * cost about twelve directory operations an attempt, each a journaled metadata change of the
 * filesystem, plus an fsync of a file and of its directory for the exit record: a fifth of the
 * agent's time under load (measured). Here a record is one write() into the page cache, and the
 * exits that end together share one fdatasync.
 *
 * What a crash can do to it: a crash of the agent alone loses nothing (every append is a whole
 * line written by one system call, and the page cache outlives the process). A crash of the host
 * can lose whatever was appended since the last fdatasync, and can leave the last line cut short:
 * a cut line is dropped (and cut off the file before the next append), which reads as "that
 * record was never written". Exit records are synced before anyone is told of the exit, so the
 * ones a host crash can lose are assignments, pids and reported marks, whose loss it makes
 * harmless (see agent-state.ts).
 *
 * Compaction: the file grows by a few lines an attempt, so once it holds many times more lines
 * than the attempts still known, it is rewritten with only those (temporary file, fdatasync,
 * rename, fsync of the directory): once every few hundred attempts. Its file calls run off the
 * event loop (they stalled every start and pid line in flight for 0.3-8 ms); appends go on into
 * the old file meanwhile and are copied over before the rename. Why no record is lost at any
 * step, and no durable() promise broken by a crash of the host: docs/agent.md, "The journal's
 * compaction, off the event loop".
 */
import { closeSync, existsSync, fdatasync, fsyncSync, open, openSync, readFileSync, renameSync, truncateSync, unlinkSync, write, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { syncDir } from './write-file-atomic.js';
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import type { AttemptUsageWire } from '../../api/contract/containment.js';
import type { ProcessEndKind } from '../attempt/process-runner.js';
import type { CgroupRef } from '../contain/attempt-cgroup.js';
import { errorText } from '../../lib/error-text.js';

/** Enough to tell, after a restart, whether a live process group with this id is still ours. */
export interface PidRecord {
  pid: number;
  bootId: string | null;
  /**
   * The machine's uptime in seconds when the pid was recorded: the process this pid named then had
   * started by that time, so a live one that started later is another (agent-state.ts,
   * survivingGroup). Written by this agent; an older agent wrote `startTime` instead.
   */
  recordedAtUptime?: number;
  /** An older agent's record: the process's start time in clock ticks since boot, read from /proc at the spawn; null in this agent's. */
  startTime?: string | null;
  /** When it was recorded (ms since the epoch): where a re-attached attempt's timeout counts from. */
  at?: number;
}

/** What identifies an attempt to the server and to a person reading the log. */
export type AttemptIdentity = Pick<AssignmentWire, 'attemptId' | 'token' | 'jobId' | 'stageName' | 'attemptNumber'>;

/**
 * How an attempt's run ended on this agent: a process's end, a failure around it, or its cgroup's
 * OOM count moved (attempt-end.ts, docs/containment.md).
 */
export type ExitKind = ProcessEndKind | 'inputs-failed' | 'outputs-failed' | 'oom-killed';

export interface ExitRecord {
  /** Absent from the records of agents before typed ends: exitEnd (exit-end.ts) reads those. */
  kind?: ExitKind;
  exitCode: number | null;
  signal: string | null;
  reason: string | null;
  finishedAt: string;
  /** Enough to report the outcome should the assignment record (not synced) be lost with the host. */
  attempt?: AttemptIdentity;
  /** Set when the agent had stopped caring before the exit was recorded (see Run.dropped): nothing is reported. */
  dropped?: string;
  /**
   * What it used, read from its cgroups once they were empty (they are removed after this record
   * is durable, so a restart reports it from here). Absent: it had none, or an older agent wrote it.
   */
  usage?: AttemptUsageWire;
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

/** Everything recorded about one attempt. */
export interface AttemptRecords {
  assignment?: AssignmentWire;
  /** The recycled cgroup it was given (cgroup-tree.ts); absent: its own, named after it, or none. */
  cgroup?: CgroupRef;
  pid?: PidRecord;
  exit?: ExitRecord;
  reported?: ReportedRecord;
}

type Kind = keyof AttemptRecords;
const KINDS: readonly Kind[] = ['assignment', 'cgroup', 'pid', 'exit', 'reported'];

export const JOURNAL_FILE = 'attempts.journal';
/** Compaction waits for at least this many lines, and for this many times more lines than records. */
const COMPACT_MIN_LINES = 2000;
const COMPACT_RATIO = 4;

/**
 * The file calls a compaction makes, in the order it makes them (docs/agent.md, "The journal's
 * compaction, off the event loop"): the asynchronous ones run in libuv's thread pool. A test
 * replaces them to stop a compaction at each one (attempt-journal.test.ts).
 */
export interface CompactionFiles {
  /** Creates or truncates the temporary file, owner-only. */
  open(path: string): Promise<number>;
  write(fd: number, text: string): Promise<void>;
  /** On the loop: the few lines appended while the snapshot was written. */
  writeSync(fd: number, text: string): void;
  fdatasync(fd: number): Promise<void>;
  rename(from: string, to: string): void;
  /** The directory's entry for the renamed file; best effort where a platform cannot. */
  syncDirectory(dir: string): Promise<void>;
  close(fd: number): void;
  unlink(path: string): void;
}

export const NODE_COMPACTION_FILES: CompactionFiles = {
  open: (path) => new Promise((res, rej) => open(path, 'w', 0o600, (err, fd) => (err ? rej(err) : res(fd)))),
  write: (fd, text) => writeAll(fd, Buffer.from(text)),
  writeSync: (fd, text) => void writeSync(fd, text),
  fdatasync: (fd) => new Promise((res, rej) => fdatasync(fd, (err) => (err ? rej(err) : res()))),
  rename: renameSync,
  syncDirectory: syncDir,
  close: closeSync,
  unlink: unlinkSync,
};

export interface AttemptJournalOptions {
  files?: CompactionFiles;
  /** A compaction that failed (the old file stays the journal: nothing is lost); tried again after COMPACT_MIN_LINES more lines. */
  onCompactionError?: (err: unknown) => void;
}

/** A compaction under way: the lines appended since its snapshot, in order, to copy into the new file. */
interface Compaction {
  tail: string[];
}

export class AttemptJournal {
  readonly path: string;
  private fd: number | null = null;
  private readonly records = new Map<string, AttemptRecords>();
  /**
   * Each record's line as it was appended (its `at` with it), so that a compaction's snapshot is
   * a join of strings taken on the loop, not a JSON.stringify of every record still known.
   */
  private readonly texts = new Map<string, Partial<Record<Kind, string>>>();
  private readonly files: CompactionFiles;
  private readonly onCompactionError: (err: unknown) => void;
  private compaction: Compaction | null = null;
  /** Set from the copy of a compaction's tail to its rename: durable() waits, so nothing is promised on the old file then. */
  private switching: Promise<void> | null = null;
  /** The directory's sync after a compaction's rename: durable() waits for it too. */
  private dirSynced: Promise<void> | null = null;
  /** The next compaction waits for this many lines at least (moved on after one failed). */
  private compactAt = COMPACT_MIN_LINES;
  /** Lines in the file: what compaction weighs against the records still known. */
  private lines = 0;
  private loaded = false;
  /** Lines that could not be read at the last load (a damaged file; a cut last line is not one). */
  broken: { line: number; error: string }[] = [];
  private syncing: Promise<void> | null = null;
  private queued: Promise<void> | null = null;

  constructor(dataDir: string, opts: AttemptJournalOptions = {}) {
    this.path = join(dataDir, JOURNAL_FILE);
    this.files = opts.files ?? NODE_COMPACTION_FILES;
    this.onCompactionError = opts.onCompactionError ?? (() => {});
  }

  /**
   * Reads the file again, from the start. `repair`, for the one process that appends to it: a cut
   * last line is cut off the file too, so that the next line starts a line of its own.
   */
  load(repair = true): void {
    // A compaction under way is given up (its next step sees it): its snapshot is of the records read before.
    this.compaction = null;
    this.records.clear();
    this.texts.clear();
    this.broken = [];
    this.lines = 0;
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      text = '';
    }
    const end = text.lastIndexOf('\n') + 1;
    if (repair && end < text.length) truncateSync(this.path, Buffer.byteLength(text.slice(0, end)));
    const lines = text.slice(0, end).split('\n');
    lines.pop();
    lines.forEach((line, i) => {
      this.lines++;
      let entry: unknown;
      try {
        entry = JSON.parse(line);
      } catch (err) {
        this.broken.push({ line: i + 1, error: errorText(err) });
        return;
      }
      if (!isEntry(entry)) {
        this.broken.push({ line: i + 1, error: 'not a record' });
        return;
      }
      this.fold(entry, line + '\n');
    });
    this.loaded = true;
  }

  get(id: string): AttemptRecords | undefined {
    this.ensureLoaded();
    return this.records.get(id);
  }

  ids(): string[] {
    this.ensureLoaded();
    return [...this.records.keys()];
  }

  /**
   * One line, into the page cache (call durable() for the disk). `at` (ms since the epoch): when it
   * happened, written beside the record for a person or a bench to read (the assignment's: when it
   * was received, bench/journal-spawns.ts); never read back by the agent.
   */
  append(id: string, kind: Kind | 'removed', value: unknown = true, at?: number): void {
    this.ensureLoaded();
    const entry = (at === undefined ? { id, [kind]: value } : { id, [kind]: value, at }) as Entry;
    const line = JSON.stringify(entry) + '\n';
    writeSync(this.open(), line);
    this.lines++;
    this.fold(entry, line);
    if (this.compaction) this.compaction.tail.push(line);
    else if (this.lines >= this.compactAt && this.lines >= COMPACT_RATIO * this.recordCount()) this.compact();
  }

  /**
   * Resolves once everything appended before the call is on disk. Calls that come while a sync
   * runs share the next one: under load, many exits to one fdatasync.
   */
  durable(): Promise<void> {
    if (!this.syncing) {
      this.syncing = this.syncNow().finally(() => (this.syncing = null));
      return this.syncing;
    }
    this.queued ??= this.syncing.then(
      () => this.next(),
      () => this.next(),
    );
    return this.queued;
  }

  close(): void {
    this.compaction = null;
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    this.closeAfterSync(fd);
  }

  /** Whether a compaction is under way (for tests: a compaction ends on its own, off the loop). */
  get compacting(): boolean {
    return this.compaction !== null;
  }

  /** Closes a descriptor once a sync running on it is over. */
  private closeAfterSync(fd: number): void {
    void (this.syncing ?? Promise.resolve()).then(
      () => closeSync(fd),
      () => closeSync(fd),
    );
  }

  private next(): Promise<void> {
    this.queued = null;
    return this.durable();
  }

  private async syncNow(): Promise<void> {
    // From a compaction's copy of its tail to its rename, a promise made on the old file could be
    // broken by the rename: the sync waits for the new file.
    while (this.switching) await this.switching;
    const fd = this.open();
    await new Promise<void>((resolve, reject) => fdatasync(fd, (err) => (err ? reject(err) : resolve())));
    // The new file's name is durable only once its directory is synced.
    if (this.dirSynced) await this.dirSynced;
  }

  private ensureLoaded(): void {
    if (!this.loaded) this.load();
  }

  private open(): number {
    if (this.fd !== null) return this.fd;
    const created = !existsSync(this.path);
    // Owner-only: assignments carry their stages' secretEnv values (docs/security.md).
    this.fd = openSync(this.path, 'a', 0o600);
    // The file's name must outlive a crash of the host as well as its contents.
    if (created) syncDirectory(dirname(this.path));
    return this.fd;
  }

  private fold(entry: Entry, line: string): void {
    if ('removed' in entry) {
      this.records.delete(entry.id);
      this.texts.delete(entry.id);
      return;
    }
    const rec = this.records.get(entry.id) ?? {};
    const texts = this.texts.get(entry.id) ?? {};
    const kinds = KINDS.filter((k) => k in entry);
    for (const k of kinds) {
      (rec as Record<Kind, unknown>)[k] = (entry as unknown as Record<Kind, unknown>)[k];
      // A line of several records (none is written so) is written out again one record a line.
      texts[k] = kinds.length === 1 ? line : JSON.stringify({ id: entry.id, [k]: rec[k] }) + '\n';
    }
    this.records.set(entry.id, rec);
    this.texts.set(entry.id, texts);
  }

  private recordCount(): number {
    let n = 0;
    for (const rec of this.records.values()) for (const k of KINDS) if (rec[k] !== undefined) n++;
    return n;
  }

  /**
   * Rewrites the file with the records still known, off the event loop (docs/agent.md, "The
   * journal's compaction, off the event loop"). Appends go on into the old file until the rename,
   * which is one step on the loop with the copy of the last lines: the journal's name always
   * holds every record.
   */
  private compact(): void {
    const c: Compaction = { tail: [] };
    this.compaction = c;
    let text = '';
    let n = 0;
    for (const texts of this.texts.values())
      for (const k of KINDS) {
        const line = texts[k];
        if (line === undefined) continue;
        text += line;
        n++;
      }
    void this.runCompaction(c, text, n);
  }

  private async runCompaction(c: Compaction, text: string, n: number): Promise<void> {
    const f = this.files;
    const tmp = `${this.path}.tmp`;
    let fd: number | null = null;
    let release = (): void => {};
    try {
      // 1. The snapshot into the temporary file, synced: durable() goes on syncing the old file.
      fd = await f.open(tmp);
      await f.write(fd, text);
      await f.fdatasync(fd);
      if (this.compaction !== c) return this.giveUp(fd, tmp);
      // 2. The lines appended meanwhile, copied and synced: some may have been promised durable
      // on the old file. From here durable() waits, so the lines appended during this sync are
      // promised nothing until the new file is the journal.
      this.switching = new Promise((res) => (release = res));
      const copied = c.tail.splice(0);
      if (copied.length) {
        f.writeSync(fd, copied.join(''));
        await f.fdatasync(fd);
      }
      if (this.compaction !== c) return this.giveUp(fd, tmp);
      // 3. One step on the loop: the last lines copied, the rename, the descriptor swapped.
      const rest = c.tail.splice(0);
      if (rest.length) f.writeSync(fd, rest.join(''));
      f.rename(tmp, this.path);
      const old = this.fd;
      this.fd = fd;
      fd = null;
      this.compaction = null;
      this.lines = n + copied.length + rest.length;
      this.compactAt = COMPACT_MIN_LINES;
      if (old !== null) this.closeAfterSync(old);
      // 4. The directory synced, off the loop; the next durable() waits for it.
      const synced = f
        .syncDirectory(dirname(this.path))
        // Best effort, as at the file's creation: a platform that cannot sync a directory says so here.
        .catch((err: unknown) => this.onCompactionError(err))
        .finally(() => {
          if (this.dirSynced === synced) this.dirSynced = null;
        });
      this.dirSynced = synced;
    } catch (err) {
      // The old file is still the journal, every line in it: nothing is lost.
      if (fd !== null) this.giveUp(fd, tmp);
      if (this.compaction === c) {
        this.compaction = null;
        this.compactAt = this.lines + COMPACT_MIN_LINES;
      }
      this.onCompactionError(err);
    } finally {
      this.switching = null;
      release();
    }
  }

  private giveUp(fd: number, tmp: string): void {
    try {
      this.files.close(fd);
      this.files.unlink(tmp);
    } catch {
      // Left for the next compaction, which truncates it; a load never reads it.
    }
  }
}

/** One buffer, whole, at the file's offset (a write to a file may take part of it). */
async function writeAll(fd: number, buf: Buffer): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    off += await new Promise<number>((res, rej) => write(fd, buf, off, buf.length - off, null, (err, n) => (err ? rej(err) : res(n))));
  }
}

/** The records of one attempt as the journal in `dataDir` has them now (for tests and for a person). */
export function readAttemptRecords(dataDir: string, attemptId: string): AttemptRecords | undefined {
  const j = new AttemptJournal(dataDir);
  j.load(false);
  return j.get(attemptId);
}

type Entry = { id: string } & (
  { assignment: AssignmentWire } | { cgroup: CgroupRef } | { pid: PidRecord } | { exit: ExitRecord } | { reported: ReportedRecord } | { removed: true }
);

function isEntry(v: unknown): v is Entry {
  if (typeof v !== 'object' || v === null || typeof (v as { id?: unknown }).id !== 'string') return false;
  return KINDS.some((k) => k in v) || 'removed' in v;
}

function syncDirectory(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // Not every platform lets a directory be synced.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
