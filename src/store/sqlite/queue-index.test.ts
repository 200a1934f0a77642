import SQLite from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { job, stage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { sqliteStoreForTests } from './sqlite-store-for-tests.js';

const now = 1_700_000_000_000;

/**
 * The queue's reads go through the queue index, whatever the backlog. The index holds ready
 * stages only (migration 0016), and a planner uses such a partial index only when the query's
 * text says `state = 'ready'`: a read that bound the state as a value instead would still answer
 * right, by scanning every stage ever submitted. Each statement the queue's readers run is
 * planned here, and none may scan the stages table.
 */
describe('the queue index', () => {
  let sqlite: SQLite.Database;
  let store: KyselyStore;
  let seen: string[];

  beforeEach(async () => {
    sqlite = new SQLite(':memory:');
    seen = [];
    store = sqliteStoreForTests(sqlite, { direct: false, log: (q) => seen.push(q) });
    await store.migrate();
  });
  afterEach(async () => {
    await store.close();
  });

  it('serves every read of the queue, with no scan of the stages table', async () => {
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b')]), source: null, now });
    seen = [];
    const shapes = await store.readyShapes({ now });
    expect(shapes.length).toBe(1);
    const heads = await store.queueHeads({ now, shapes: shapes.map((s) => ({ shape: s.shape, limit: 10 })) });
    expect(heads.map((h) => h.stageName).sort()).toEqual(['a', 'b']);
    expect((await store.queueStats()).map((q) => q.ready)).toEqual([2]);
    expect(await store.stageQueuePosition({ stageId: j.stages.find((s) => s.name === 'b')!.id })).toMatchObject({ waiting: 2 });

    // The queue's reads: the shapes walk, the heads, the stats, the position (the stage's own row is read by id first).
    const reads = [...new Set(seen)].filter((q) => /from "?stages"?/i.test(q) && /shape/.test(q));
    expect(reads.length).toBeGreaterThanOrEqual(4);
    for (const q of reads) {
      const params = Array((q.match(/\?/g) ?? []).length).fill('x');
      const plan = (sqlite.prepare(`explain query plan ${q}`).all(...params) as { detail: string }[]).map((r) => r.detail);
      expect(
        plan.filter((d) => /^SCAN stages\b/.test(d) && !/USING (COVERING )?INDEX/.test(d)),
        q,
      ).toEqual([]);
      if (/where .*shape/i.test(q) || /group by/i.test(q)) expect(plan.join(' | '), q).toMatch(/stages_ready/);
    }
  });
});
