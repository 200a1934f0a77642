import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { job, stage } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { KyselyStore } from './kysely-store.js';
import { prepared } from './prepared-query.js';

describe('prepared queries', () => {
  let store: KyselyStore;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('puts each argument where its stand-in was, constants where they were, on every run', async () => {
    const a = await store.jobSubmit({ definition: job([stage('x')], { name: 'a' }), source: null, now });
    const b = await store.jobSubmit({ definition: job([stage('x')], { name: 'b' }), source: null, now });
    // Arguments in another order than their columns, one used twice, a constant between them.
    const rename = prepared<[name: string, id: string, at: number]>()((db, [name, id, at]) =>
      db.updateTable('jobs').set({ updated_at: at, name, finished_at: at, failure_reason: 'constant' }).where('id', '=', id).where('state', '!=', 'failed'),
    );
    expect(await rename.affected(store.db, 'renamed-a', a.id, 5)).toBe(1);
    expect(await rename.affected(store.db, 'renamed-b', b.id, 7)).toBe(1);
    expect(await rename.affected(store.db, 'nobody', 'no-such-job', 9)).toBe(0);
    const get = prepared<[id: string]>()((db, [id]) =>
      db.selectFrom('jobs').select(['name', 'updated_at', 'finished_at', 'failure_reason']).where('id', '=', id),
    );
    expect(await get.first(store.db, a.id)).toEqual({ name: 'renamed-a', updated_at: 5, finished_at: 5, failure_reason: 'constant' });
    expect(await get.first(store.db, b.id)).toEqual({ name: 'renamed-b', updated_at: 7, finished_at: 7, failure_reason: 'constant' });
    expect(await get.rows(store.db, 'no-such-job')).toEqual([]);
  });

  it('runs inside a transaction as any query does', async () => {
    const a = await store.jobSubmit({ definition: job([stage('x')]), source: null, now });
    const touch = prepared<[id: string, at: number]>()((db, [id, at]) => db.updateTable('jobs').set({ updated_at: at }).where('id', '=', id));
    await expect(
      store.db.transaction().execute(async (trx) => {
        await touch.affected(trx, a.id, 42);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect((await store.jobGet({ jobId: a.id }))!.updatedAt).toBe(now);
  });

  it('refuses an argument written into the SQL text, or changed before it was bound', async () => {
    const inText = prepared<[table: string]>()((db, [t]) =>
      db
        .selectFrom('jobs')
        .select('id')
        .where(sql.raw(`name = '${t}'`) as never),
    );
    await expect(inText.rows(store.db, 'x')).rejects.toThrow(/written into the SQL text/);
    const stringified = prepared<[labels: string[]]>()((db, [labels]) => db.updateTable('jobs').set({ labels: JSON.stringify(labels) }));
    await expect(stringified.affected(store.db, ['a'])).rejects.toThrow(/transformed before it was bound/);
  });
});
