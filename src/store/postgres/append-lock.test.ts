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
import { placeAll } from '../conformance/fixtures.js';
import type { OutboxMessage } from '../records.js';
import { countStatements } from '../../../test/support/statement-counter.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

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
  const outboxRow = (topic: string) => [topic, '{}', 1];
  /** The first append of a transaction: an event, or an audit row and an event in one statement; with the transaction's outbox row or not. */
  const locking = (message: string, withAudit: boolean, withOutbox = false) => {
    const o = withOutbox ? outboxRow(message) : [];
    return withAudit
      ? CompiledQuery.raw(lockingAppend(1, 1, o.length ? 1 : 0), [...o, ...audit(message), ...event(message)])
      : CompiledQuery.raw(lockingAppend(1, 0, o.length ? 1 : 0), [...o, ...event(message)]);
  };
  /** Whether a backend other than this test's waits on an advisory lock now. */
  const someoneWaits = async () =>
    (await store.db.executeQuery<{ n: string }>(CompiledQuery.raw(`select count(*) as n from pg_locks where locktype = 'advisory' and not granted`))).rows[0]!
      .n !== '0';

  it.each([
    [false, false],
    [true, false],
    [false, true],
    [true, true],
  ])(
    "a transaction waiting for the lock takes its numbers after every row of the holder's, written before or after it began to wait (with audit rows: %s, with an outbox row: %s)",
    async (withAudit, withOutbox) => {
      let holding!: () => void;
      const held = new Promise<void>((r) => (holding = r));
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      const first = store.db.transaction().execute(async (trx) => {
        await trx.executeQuery(locking('first, before', withAudit, withOutbox));
        holding();
        await released;
        // A second part of the holder's events (a transaction of more than one insert's worth).
        await trx.insertInto('events').values({ at: 1, type: 'test', message: 'first, after', data: '{}' }).execute();
        if (withAudit) await trx.insertInto('audit').values({ at: 1, actor: 'someone', action: 'test', target: 'first, after', result: 'ok' }).execute();
      });
      await held;
      const second = store.db.transaction().execute(async (trx) => {
        await trx.executeQuery(locking('second', withAudit, withOutbox));
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

  it('writes outbox rows in the same statement and answers their ids in their order', async () => {
    const rows = [...outboxRow('pool:ready'), ...['batch', '[{"topic":"a","payload":{}}]', 2]];
    const ids = await store.db.transaction().execute(async (trx) => {
      const withEvent = await trx.executeQuery<{ id: string }>(CompiledQuery.raw(lockingAppend(1, 0, 2), [...rows, ...event('e')]));
      const withAudit = await trx.executeQuery<{ id: string }>(CompiledQuery.raw(lockingAppend(0, 1, 1), [...outboxRow('alone'), ...audit('t')]));
      return [...withEvent.rows, ...withAudit.rows].map((r) => Number(r.id));
    });
    const outbox = await store.db.selectFrom('outbox').selectAll().orderBy('id').execute();
    expect(outbox.map((r) => [Number(r.id), r.topic, r.payload, Number(r.created_at), r.published_at])).toEqual([
      [ids[0], 'pool:ready', '{}', 1, null],
      [ids[1], 'batch', '[{"topic":"a","payload":{}}]', 2, null],
      [ids[2], 'alone', '{}', 1, null],
    ]);
    expect((await store.db.selectFrom('events').select('message').execute()).map((r) => r.message)).toEqual(['e']);
    expect((await store.db.selectFrom('audit').select('target').execute()).map((r) => r.target)).toEqual(['t']);
  });

  it("a report's outbox row is no round trip of its own: it rides in the append (docs/replicas.md)", async () => {
    // With replicas the outbox is rows (one replica keeps it in memory): the row of a report's
    // messages was the one statement more a report sent than with one replica.
    const now = 1_700_000_000_000;
    const { m, placed } = await placeAll(store, ['x'], now);
    const handed: OutboxMessage[] = [];
    store.onOutbox((ms) => handed.push(...ms));
    const before = (await store.db.selectFrom('outbox').select('id').execute()).map((row) => Number(row.id));
    statements.reset();
    const x = placed[0]!;
    const done = { exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] };
    const r = await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: x.id, token: x.token, pid: null }],
      completed: [{ attemptId: x.id, token: x.token, ...done }],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    expect(r.completed.map((c) => c.result)).toEqual(['ok']);
    const texts = [...statements.snapshot().byText.keys()];
    expect(texts.filter((t) => t.startsWith('insert into "outbox"'))).toEqual([]);
    expect(texts.filter((t) => t.startsWith('with o as (insert into "outbox"'))).toHaveLength(1);
    // What the commit handed on is what the table holds: the same row, its messages in order.
    const stored = handed.filter((h) => h.stored !== false);
    expect(stored.length).toBeGreaterThan(0);
    const rows = (await store.db.selectFrom('outbox').selectAll().orderBy('id').execute()).filter((row) => !before.includes(Number(row.id)));
    expect(rows.map((row) => Number(row.id))).toEqual([...new Set(stored.map((h) => h.id))]);
    const row = rows[0]!;
    const inRow = row.topic === 'batch' ? (JSON.parse(row.payload) as { topic: string }[]).map((t) => t.topic) : [row.topic];
    expect(stored.map((h) => h.topic)).toEqual(inRow);
  });
});
