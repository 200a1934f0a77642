/**
 * Events in commit order on PostgreSQL (docs/store-contract.md, "Sequences in commit order"): the
 * first insert of a transaction's events takes the append lock in its own plan. The lock must be
 * taken before any of its rows takes a `seq`, or a transaction waiting for the lock would hold a
 * number smaller than rows its holder writes after it and commits first.
 */
import { CompiledQuery } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { lockingAppend } from '../kysely/tx-context.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);

describe.skipIf(pgMissing)('the append lock taken by the insert of events (PostgreSQL)', () => {
  let store: KyselyStore;
  beforeEach(async () => {
    store = await freshPostgresStore('append_lock');
  });
  afterEach(async () => {
    await store?.close();
  });

  const event = (message: string) => [1, 'test', null, null, null, null, message, '{}'];
  const audit = (target: string) => [1, null, 'someone', 'test', target, 'ok', null];
  /** The first append of a transaction: an event, or an audit row and an event in one statement. */
  const locking = (message: string, withAudit: boolean) =>
    withAudit ? CompiledQuery.raw(lockingAppend(1, 1), [...audit(message), ...event(message)]) : CompiledQuery.raw(lockingAppend(1, 0), event(message));
  /** Whether a backend other than this test's waits on an advisory lock now. */
  const someoneWaits = async () =>
    (await store.db.executeQuery<{ n: string }>(CompiledQuery.raw(`select count(*) as n from pg_locks where locktype = 'advisory' and not granted`))).rows[0]!
      .n !== '0';

  it.each([false, true])(
    "a transaction waiting for the lock takes its numbers after every row of the holder's, written before or after it began to wait (with audit rows: %s)",
    async (withAudit) => {
      let holding!: () => void;
      const held = new Promise<void>((r) => (holding = r));
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      const first = store.db.transaction().execute(async (trx) => {
        await trx.executeQuery(locking('first, before', withAudit));
        holding();
        await released;
        // A second part of the holder's events (a transaction of more than one insert's worth).
        await trx.insertInto('events').values({ at: 1, type: 'test', message: 'first, after', data: '{}' }).execute();
        if (withAudit) await trx.insertInto('audit').values({ at: 1, actor: 'someone', action: 'test', target: 'first, after', result: 'ok' }).execute();
      });
      await held;
      const second = store.db.transaction().execute(async (trx) => {
        await trx.executeQuery(locking('second', withAudit));
      });
      // The second is blocked on the lock: wait until the database says so, then let the first go on.
      for (let i = 0; i < 100 && !(await someoneWaits()); i++) await new Promise((r) => setTimeout(r, 20));
      expect(await someoneWaits()).toBe(true);
      release();
      await Promise.all([first, second]);
      const rows = await store.db.selectFrom('events').select(['message']).orderBy('seq').execute();
      expect(rows.map((r) => r.message)).toEqual(['first, before', 'first, after', 'second']);
      const audits = await store.db.selectFrom('audit').select(['target']).orderBy('seq').execute();
      expect(audits.map((r) => r.target)).toEqual(withAudit ? ['first, before', 'first, after', 'second'] : []);
    },
  );

  it('writes every row given, with its columns, in one statement', async () => {
    const audits = [...[7, 'tok', 'alice', 'job.submit', 'j1', 'ok', null], ...[7, null, 'bob', 'token.create', null, "ok: it's", 'k']];
    const values = [...[5, 'a:b', 'j1', 's1', 'at1', 'm1', 'one', '{"k":1}'], ...[6, 'c:d', null, null, null, null, "two's", '{}']];
    await store.db.transaction().execute(async (trx) => {
      await trx.executeQuery(CompiledQuery.raw(lockingAppend(2, 2), [...audits, ...values]));
      await trx.executeQuery(CompiledQuery.raw(lockingAppend(0, 1), audits.slice(0, 7)));
    });
    const written = await store.db.selectFrom('audit').selectAll().orderBy('seq').execute();
    expect(written.map((r) => [Number(r.at), r.token_id, r.actor, r.action, r.target, r.result, r.fold_key])).toEqual([
      [7, 'tok', 'alice', 'job.submit', 'j1', 'ok', null],
      [7, null, 'bob', 'token.create', null, "ok: it's", 'k'],
      [7, 'tok', 'alice', 'job.submit', 'j1', 'ok', null],
    ]);
    const rows = await store.db.selectFrom('events').selectAll().orderBy('seq').execute();
    expect(rows.map((r) => [Number(r.at), r.type, r.job_id, r.stage_name, r.attempt_id, r.machine_id, r.message, r.data])).toEqual([
      [5, 'a:b', 'j1', 's1', 'at1', 'm1', 'one', '{"k":1}'],
      [6, 'c:d', null, null, null, null, "two's", '{}'],
    ]);
  });
});
