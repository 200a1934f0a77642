import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { job, stage } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { KyselyStore } from './kysely-store.js';

const now = 1_700_000_000_000;

/**
 * The reconciler's repair pass (jobsRepair) on jobs put by hand into the states it exists for: a
 * job the advancer left between two states, which no transaction will ever move again.
 */
describe('jobsRepair', () => {
  let store: KyselyStore;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  /** A job whose stage `a` is sent back to pending (nothing queued, placed or running), unchanged since `at`. */
  const stuck = async (name: string, at: number) => {
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name }), source: null, now: at });
    await sql`update stages set state = 'pending' where job_id = ${j.id} and name = 'a'`.execute(store.db);
    return j.id;
  };

  it('moves a job that has not changed for staleAfterMs and has no stage moving, and only that', async () => {
    const old = await stuck('old', now - 60_000);
    const recent = await stuck('recent', now - 1_000);
    // Waiting in the queue for as long as the stuck one: not stuck, whatever its age.
    const waiting = (await store.jobSubmit({ definition: job([stage('w')], { name: 'waiting' }), source: null, now: now - 60_000 })).id;
    const r = await store.jobsRepair({ now, staleAfterMs: 30_000, limit: 10 });
    expect(r).toEqual({ moved: [old], next: null });
    const stateOf = async (id: string) => (await store.jobGet({ jobId: id }))!.stages.map((s) => `${s.name}:${s.state}`);
    expect(await stateOf(old)).toEqual(['a:ready', 'b:pending']);
    expect(await stateOf(recent)).toEqual(['a:pending', 'b:pending']);
    expect(await stateOf(waiting)).toEqual(['w:ready']);
    // Moved jobs are touched: the next pass finds nothing to do.
    expect((await store.jobsRepair({ now: now + 1, staleAfterMs: 30_000, limit: 10 })).moved).toEqual([]);
  });

  it('moves at most `limit` jobs a pass, in id order, and leaves ended jobs alone', async () => {
    const ids = [await stuck('s1', now - 60_000), await stuck('s2', now - 60_000), await stuck('s3', now - 60_000)].sort();
    // An ended job with a stage that never ran (skipped) is not unfinished: never looked at.
    const ended = await stuck('ended', now - 60_000);
    await sql`update jobs set state = 'canceled' where id = ${ended}`.execute(store.db);
    expect((await store.jobsRepair({ now, staleAfterMs: 30_000, limit: 2 })).moved).toEqual(ids.slice(0, 2));
    expect((await store.jobsRepair({ now, staleAfterMs: 30_000, limit: 2 })).moved).toEqual(ids.slice(2));
    expect((await store.jobGet({ jobId: ended }))!.stages.map((s) => s.state)).toEqual(['pending', 'pending']);
  });
});
