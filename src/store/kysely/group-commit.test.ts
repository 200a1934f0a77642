import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NotFoundError } from '../../domain/errors.js';
import { job, stage } from '../conformance/fixtures.js';
import { sqliteStoreForTests } from '../sqlite/sqlite-store-for-tests.js';
import type { KyselyStore } from './kysely-store.js';

/**
 * Both ways a group runs: on SQLite's connection directly, as the server does (first without
 * savepoints, again with them if a part failed after writing: docs/throughput.md), and through
 * Kysely alone (savepoints always).
 */
const sqliteStore = (sqlite: SQLite.Database, direct: boolean, log?: (sql: string) => void) => sqliteStoreForTests(sqlite, { direct, ...(log ? { log } : {}) });

describe.each([
  { mode: 'on the connection directly (optimistic first)', direct: true },
  { mode: 'through Kysely (savepoints always)', direct: false },
])('group commit (one writer), $mode', ({ direct }) => {
  let store: KyselyStore;
  let commits = 0;
  let begins = 0;
  beforeEach(async () => {
    store = sqliteStore(new SQLite(':memory:'), direct, (sql) => {
      if (sql === 'commit') commits++;
      if (sql === 'begin') begins++;
    });
    await store.migrate();
    commits = 0;
    begins = 0;
  });
  afterEach(async () => {
    await store.close();
  });

  it('calls made together share one commit; one that fails changes nothing and the others stand', async () => {
    const now = 1_700_000_000_000;
    const published: number[] = [];
    store.onOutbox((m) => published.push(m.length));
    const submits = Array.from({ length: 10 }, (_, i) => store.jobSubmit({ definition: job([stage('a')], { name: `j${i}` }), source: null, now }));
    const bad = store.attemptStart({ attemptId: 'att_missing', token: 1, pid: null, now, leaseMs: 1000 });
    const more = store.jobSubmit({ definition: job([stage('a')], { name: 'last' }), source: null, now });
    const results = await Promise.allSettled([...submits, bad, more]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(11);
    expect((results[10] as PromiseRejectedResult).reason).toBeInstanceOf(NotFoundError);
    // All made in one turn of the event loop: one transaction, one commit; the failed call wrote
    // nothing before it failed, so the group did not have to run again with savepoints.
    expect(commits).toBe(1);
    expect(begins).toBe(1);
    // A call alone is a group of one.
    await store.jobSubmit({ definition: job([stage('a')], { name: 'alone' }), source: null, now });
    expect(commits).toBe(2);
    expect((await store.jobList({ limit: 100 })).map((j) => j.name).sort()).toEqual([...Array.from({ length: 10 }, (_, i) => `j${i}`), 'alone', 'last'].sort());
    // Each committed call's outbox rows were handed on after the commit.
    expect(published).toHaveLength(12);
  });

  it('when the database drops the whole transaction (disk full), every member fails and none commits', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gantry-gc-'));
    const sqlite = new SQLite(join(dir, 'db'));
    sqlite.pragma('journal_mode = WAL');
    const full = sqliteStore(sqlite, direct);
    try {
      await full.migrate();
      const now = 1_700_000_000_000;
      const pages = Number(sqlite.pragma('page_count', { simple: true }));
      sqlite.pragma(`max_page_count = ${pages + 20}`);
      await full.jobSubmit({ definition: job([stage('a')], { name: 'first' }), source: null, now });
      const huge = full.jobSubmit({ definition: job([stage('a')], { name: 'huge' }), source: 'x'.repeat(800_000), now });
      const after = full.jobSubmit({ definition: job([stage('a')], { name: 'after' }), source: null, now });
      const r = await Promise.allSettled([huge, after]);
      expect(r[0].status).toBe('rejected');
      expect(r[1].status).toBe('rejected');
      sqlite.pragma(`max_page_count = ${pages * 100}`);
      expect((await full.jobList({ limit: 10 })).map((j) => j.name)).toEqual(['first']);
    } finally {
      await full.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a call that fails after writing is undone alone and the others commit (run again with savepoints where it ran without)', async () => {
    const now = 1_700_000_000_000;
    // A fault only this call trips, after its job's row is written: its stages' insert fails.
    await sql`create trigger boom before insert on stages when new.name = 'boom' begin select raise(abort, 'boom'); end`.execute(store.db);
    begins = 0;
    const calls = [
      store.jobSubmit({ definition: job([stage('a')], { name: 'before' }), source: null, now }),
      store.jobSubmit({ definition: job([stage('boom')], { name: 'breaks' }), source: null, now }),
      store.jobSubmit({ definition: job([stage('a')], { name: 'after' }), source: null, now }),
    ];
    const r = await Promise.allSettled(calls);
    expect(r.map((x) => x.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(String((r[1] as PromiseRejectedResult).reason)).toMatch(/boom/);
    expect(commits).toBe(1);
    // Directly: run first without savepoints, then again with them once the failure had written.
    expect(begins).toBe(direct ? 2 : 1);
    expect((await store.jobList({ limit: 10 })).map((j) => j.name).sort()).toEqual(['after', 'before']);
    expect((await store.eventsList({ limit: 100 })).filter((e) => e.message.includes('breaks'))).toEqual([]);
  });

  it('a call that fails alone rolls back whole', async () => {
    const now = 1_700_000_000_000;
    await expect(store.jobCancel({ jobId: 'job_missing', now, reason: 'x' })).rejects.toBeInstanceOf(NotFoundError);
    expect(await store.eventsList({ limit: 10 })).toEqual([]);
  });
});
