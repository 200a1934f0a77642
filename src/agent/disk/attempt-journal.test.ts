import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AttemptJournal, JOURNAL_FILE, NODE_COMPACTION_FILES, type AttemptRecords, type CompactionFiles } from './attempt-journal.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-journal-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

type Kind = 'assignment' | 'pid' | 'exit' | 'reported';

/** What the journal must hold: every record appended, folded as the journal folds them. */
class Model {
  readonly records = new Map<string, Record<string, unknown>>();
  next = 0;
  constructor(readonly j: AttemptJournal) {}
  append(id: string, kind: Kind | 'removed', value: unknown): void {
    this.j.append(id, kind, value);
    if (kind === 'removed') this.records.delete(id);
    else this.records.set(id, { ...this.records.get(id), [kind]: value });
  }
  /** One attempt's life: settled and forgotten, or (one in ten) kept with its four records. */
  attempt(): void {
    const i = this.next++;
    const id = `att_${i}`;
    this.append(id, 'assignment', { attemptId: id, token: i });
    this.append(id, 'pid', { pid: 1000 + i, bootId: null });
    this.append(id, 'exit', { exitCode: 0, signal: null, reason: null, finishedAt: `t${i}` });
    this.append(id, 'reported', { result: 'accepted', at: `t${i}` });
    if (i % 10 !== 0) this.append(id, 'removed', true);
  }
  /** Lines a compaction's steps find appended while they run: a new attempt's first records, an older one's exit. */
  meanwhile(): void {
    const i = this.next++;
    const id = `att_${i}`;
    this.append(id, 'assignment', { attemptId: id, token: i });
    this.append(id, 'pid', { pid: 1000 + i, bootId: null });
    this.append('att_0', 'exit', { exitCode: i, signal: null, reason: null, finishedAt: `t${i}` });
  }
  /** Appends until the journal starts a compaction (2,000 lines, four times its records). */
  fillUntilCompacting(): void {
    while (!this.j.compacting) {
      this.attempt();
      if (this.next > 10_000) throw new Error('no compaction started');
    }
  }
  expectIn(d: string): void {
    const reread = new AttemptJournal(d);
    reread.load();
    expect(reread.broken).toEqual([]);
    const read = new Map<string, AttemptRecords | undefined>(reread.ids().map((id) => [id, reread.get(id)]));
    expect(read).toEqual(this.records);
  }
}

const CALLS = ['open', 'write', 'fdatasync', 'writeSync', 'fdatasync', 'writeSync', 'rename', 'syncDirectory'];

/**
 * The compaction's file calls, logged; at call number `crashAt` the process "dies": that call and
 * every later one does nothing (an asynchronous one never answers, a synchronous one throws), so
 * the files are left exactly as the calls before it made them. Before each asynchronous call that
 * runs, `during` is called: the loop's appends while the call is off the loop.
 */
function crashingFiles(crashAt: number, during: (call: string) => void, log: string[]): CompactionFiles & { dead: () => boolean } {
  let n = 0;
  let dead = false;
  const real = NODE_COMPACTION_FILES;
  const gate = (name: string): boolean => {
    if (dead) return false;
    if (n++ === crashAt) {
      dead = true;
      log.push(`crash at ${name}`);
      return false;
    }
    log.push(name);
    return true;
  };
  const hang = new Promise<never>(() => {});
  const async = <T>(name: string, run: () => Promise<T>): Promise<T> => {
    if (!gate(name)) return hang;
    during(name);
    return run();
  };
  const sync = <T>(name: string, run: () => T): T => {
    if (!gate(name)) throw new Error(`crashed before ${name}`);
    return run();
  };
  return {
    dead: () => dead,
    open: (p) => async('open', () => real.open(p)),
    write: (fd, t) => async('write', () => real.write(fd, t)),
    writeSync: (fd, t) => sync('writeSync', () => real.writeSync(fd, t)),
    fdatasync: (fd) => async('fdatasync', () => real.fdatasync(fd)),
    rename: (a, b) => sync('rename', () => real.rename(a, b)),
    syncDirectory: (d) => async('syncDirectory', () => real.syncDirectory(d)),
    // Cleanups after a failure: a dead process makes none.
    close: (fd) => {
      if (!dead) real.close(fd);
    },
    unlink: (p) => {
      if (!dead) real.unlink(p);
    },
  };
}

/** Lets the compaction's calls off the loop run until `until` holds (the assertions after it say if it never did). */
async function settle(until: () => boolean): Promise<void> {
  const end = Date.now() + 3000;
  while (!until() && Date.now() < end) await new Promise((r) => setTimeout(r, 1));
}

describe('AttemptJournal compaction', () => {
  it('starts a compaction without rewriting the file on the event loop, and ends it on its own', async () => {
    const j = new AttemptJournal(dir);
    const m = new Model(j);
    m.fillUntilCompacting();
    const appended = m.next;
    // The append that started it returned with the old file still the journal, whole.
    const linesNow = readFileSync(join(dir, JOURNAL_FILE), 'utf8').split('\n').length - 1;
    expect(linesNow).toBeGreaterThanOrEqual(2000);
    m.meanwhile();
    await settle(() => !j.compacting);
    expect(j.compacting).toBe(false);
    const after = readFileSync(join(dir, JOURNAL_FILE), 'utf8').split('\n').length - 1;
    expect(after).toBeLessThan(linesNow / 2);
    expect(m.next).toBe(appended + 1);
    // Appends after the switch land in the new file.
    m.attempt();
    await j.durable();
    m.expectIn(dir);
    j.close();
  });

  // One case a file call: the crash before call k leaves the files as calls 0..k-1 made them.
  for (let crashAt = 0; crashAt <= CALLS.length; crashAt++) {
    const at = crashAt < CALLS.length ? `before call ${crashAt} (${CALLS[crashAt]})` : 'after the last call';
    it(`loses no record when the agent dies ${at}`, async () => {
      const log: string[] = [];
      let model: Model | null = null;
      const files = crashingFiles(crashAt, () => model!.meanwhile(), log);
      const j = new AttemptJournal(dir, { files });
      model = new Model(j);
      model.fillUntilCompacting();
      await settle(() => files.dead() || !j.compacting);
      if (crashAt < CALLS.length) expect(log.at(-1)).toBe(`crash at ${CALLS[crashAt]}`);
      else expect(log).toEqual(CALLS);
      expect(log.slice(0, crashAt)).toEqual(CALLS.slice(0, crashAt));
      // What a restarted agent reads: every record appended before the death, none lost.
      model.expectIn(dir);
      // And it goes on from there: appends and a compaction of its own.
      const again = new AttemptJournal(dir);
      const m2 = new Model(again);
      again.load();
      for (const [id, rec] of model.records) m2.records.set(id, rec);
      m2.next = model.next;
      m2.fillUntilCompacting();
      await settle(() => !again.compacting);
      await again.durable();
      m2.expectIn(dir);
      again.close();
    });
  }

  it('keeps the old file and every line when a file call fails, and compacts later', async () => {
    for (let failAt = 0; failAt < CALLS.length - 1; failAt++) {
      const d = await mkdtemp(join(tmpdir(), 'gantry-journal-fail-'));
      let n = 0;
      const errors: unknown[] = [];
      let model: Model | null = null;
      const real = NODE_COMPACTION_FILES;
      const fail = <T>(run: () => T): T => {
        if (n++ === failAt) throw Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
        return run();
      };
      const files: CompactionFiles = {
        ...real,
        open: async (p) => fail(() => real.open(p)),
        write: async (fd, t) => (model!.meanwhile(), fail(() => real.write(fd, t))),
        writeSync: (fd, t) => fail(() => real.writeSync(fd, t)),
        fdatasync: async (fd) => fail(() => real.fdatasync(fd)),
        rename: (a, b) => fail(() => real.rename(a, b)),
        syncDirectory: async (x) => fail(() => real.syncDirectory(x)),
      };
      const j = new AttemptJournal(d, { files, onCompactionError: (err) => errors.push(err) });
      model = new Model(j);
      model.fillUntilCompacting();
      await settle(() => !j.compacting);
      expect(errors, `failing call ${failAt}`).toHaveLength(1);
      expect(existsSync(join(d, `${JOURNAL_FILE}.tmp`))).toBe(false);
      await j.durable();
      model.expectIn(d);
      // Tried again after 2,000 more lines (a failure after the rename: the compaction was done), and this time it succeeds.
      model.fillUntilCompacting();
      const before = readFileSync(join(d, JOURNAL_FILE), 'utf8').split('\n').length - 1;
      expect(before).toBeGreaterThanOrEqual(2000);
      await settle(() => !j.compacting);
      expect(errors).toHaveLength(1);
      expect(readFileSync(join(d, JOURNAL_FILE), 'utf8').split('\n').length - 1).toBeLessThan(before);
      await j.durable();
      model.expectIn(d);
      j.close();
      await rm(d, { recursive: true, force: true });
    }
  });

  it('syncs the old file while the snapshot is written, and holds durable() from the copy of the tail until the new file and its name are synced', async () => {
    const log: string[] = [];
    let j: AttemptJournal | null = null;
    let model: Model | null = null;
    const real = NODE_COMPACTION_FILES;
    let syncs = 0;
    const files: CompactionFiles = {
      ...real,
      // Would never end if a durable() called now waited for the compaction.
      write: async (fd, t) => {
        model!.meanwhile();
        await j!.durable();
        log.push('durable during the snapshot');
        await real.write(fd, t);
      },
      fdatasync: async (fd) => {
        if (++syncs === 2) {
          // The tail is copied: an exit appended now is promised only by the new file.
          model!.meanwhile();
          void j!.durable().then(() => log.push('durable during the switch'));
        }
        await real.fdatasync(fd);
      },
      rename: (a, b) => (log.push('rename'), real.rename(a, b)),
      syncDirectory: async (x) => {
        await real.syncDirectory(x);
        log.push('directory synced');
      },
    };
    j = new AttemptJournal(dir, { files });
    model = new Model(j);
    model.fillUntilCompacting();
    await settle(() => !j.compacting && log.includes('durable during the switch'));
    expect(log).toEqual(['durable during the snapshot', 'rename', 'directory synced', 'durable during the switch']);
    model.expectIn(dir);
    j.close();
  });
});
