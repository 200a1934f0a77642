import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NotFoundError } from '../../domain/errors.js';
import { job, stage } from '../conformance/fixtures.js';
import type { Database } from '../schema.js';
import { KyselyStore } from './kysely-store.js';

describe('group commit (one writer)', () => {
  let store: KyselyStore;
  let commits = 0;
  beforeEach(async () => {
    commits = 0;
    const db = new Kysely<Database>({
      dialect: new SqliteDialect({ database: new SQLite(':memory:') }),
      log: (e) => {
        if (e.level === 'query' && e.query.sql === 'commit') commits++;
      },
    });
    store = new KyselyStore(db, { dialect: 'sqlite', skipLocked: false, singleWriter: true });
    await store.migrate();
    commits = 0;
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
    // All made in one turn of the event loop: one transaction, one commit.
    expect(commits).toBe(1);
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
    const full = new KyselyStore(new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) }), { dialect: 'sqlite', skipLocked: false, singleWriter: true });
    try {
      await full.migrate();
      const now = 1_700_000_000_000;
      const pages = Number(sqlite.pragma('page_count', { simple: true }));
      sqlite.pragma(`max_page_count = ${pages + 20}`);
      await full.jobSubmit({ definition: job([stage('a')], { name: 'first' }), source: null, now });
      const huge = full.jobSubmit({ definition: job([stage('a')], { name: 'huge' }), source: 'x'.repeat(800_000), now });
      const after = full.jobSubmit({ definition: job([stage('a')], { name: 'after' }), source: null, now });
      const r = await Promise.allSettled([huge, after]);
      expect(r[0]!.status).toBe('rejected');
      expect(r[1]!.status).toBe('rejected');
      sqlite.pragma(`max_page_count = ${pages * 100}`);
      expect((await full.jobList({ limit: 10 })).map((j) => j.name)).toEqual(['first']);
    } finally {
      await full.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a call that fails alone rolls back whole', async () => {
    const now = 1_700_000_000_000;
    await expect(store.jobCancel({ jobId: 'job_missing', now, reason: 'x' })).rejects.toBeInstanceOf(NotFoundError);
    expect(await store.eventsList({ limit: 10 })).toEqual([]);
  });
});
