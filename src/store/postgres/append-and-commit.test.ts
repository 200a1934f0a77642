/**
 * A transaction's last append and its COMMIT in one message (append-and-commit.ts): the append
 * lock is held for PostgreSQL's own work only, never for a round trip to Node; a commit refused
 * still runs the transaction again; a failed append still leaves nothing open or written.
 */
import { CompiledQuery } from 'kysely';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { TxContext } from '../kysely/tx-context.js';
import { placeAll } from '../conformance/fixtures.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

describe.skipIf(pgMissing)('the append and its commit in one message (PostgreSQL)', () => {
  let store: KyselyStore;
  beforeEach(async () => {
    store = await freshPostgresStore('append_commit');
  });
  afterEach(async () => {
    await store?.close();
  });

  /** One transaction as the store's tx() runs it: its writes, then flush(true) as its last statement, then `after` before Kysely's COMMIT. */
  const appendTx = (message: string, after: () => Promise<void> = async () => {}, now = 1) =>
    store.db
      .transaction()
      .setIsolationLevel('serializable')
      .execute(async (trx) => {
        const ctx = new TxContext(trx, now, true);
        await ctx.event({ type: 'test', message });
        await ctx.flush(true);
        await after();
      });
  const messages = async () => (await store.db.selectFrom('events').select('message').orderBy('seq').execute()).map((r) => r.message);

  it("a holder whose Node side stalls between its append's answer and the commit keeps no other appender waiting", async () => {
    // The stall stands for a starved event loop (bench/results/fleet.md, branch `collapse`: 11–16
    // appenders waiting behind a holder idle in transaction). Sent apart, the COMMIT waits for the
    // stall, and the lock with it.
    let appended!: () => void;
    const inStall = new Promise<void>((r) => (appended = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const first = appendTx('first', async () => {
      appended();
      await released;
    });
    await inStall;
    let secondDone = false;
    const second = appendTx('second').then(() => void (secondDone = true));
    // Bounded: on main the second waits for the lock until the first is released.
    for (let i = 0; i < 150 && !secondDone; i++) await new Promise((r) => setTimeout(r, 20));
    const whileStalled = secondDone;
    release();
    await Promise.all([first, second]);
    expect(whileStalled).toBe(true);
    // And seq order is still commit order: the first committed (with its append) before the second began.
    expect(await messages()).toEqual(['first', 'second']);
  });

  it('a report sends no COMMIT of its own: the commit went with its last append', async () => {
    const now = 1_700_000_000_000;
    const { m, placed } = await placeAll(store, ['x'], now);
    const x = placed[0]!;
    statements.reset();
    const r = await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: x.id, token: x.token, pid: null }],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    expect(r.started.map((s) => s.result)).toEqual(['ok']);
    const counts = statements.snapshot();
    expect(counts.byKind.get('START')).toBe(1);
    expect(counts.byKind.get('COMMIT')).toBeUndefined();
    expect(counts.byKind.get('ROLLBACK')).toBeUndefined();
    // What it wrote is committed: another connection reads it.
    const schema = (await store.db.executeQuery<{ s: string }>(CompiledQuery.raw('select current_schema() as s'))).rows[0]!.s;
    const c = new pg.Client({ connectionString: POSTGRES_URL });
    await c.connect();
    try {
      const { rows } = await c.query(`select state from ${schema}.attempts where id = $1`, [x.id]);
      expect(rows.map((row: { state: string }) => row.state)).toEqual(['running']);
    } finally {
      await c.end();
    }
  });

  it('a commit refused with 40001 (a serializable check at commit) runs the transaction again whole, and its rows are written once', async () => {
    const now = 1_700_000_000_000;
    const { m, placed } = await placeAll(store, ['x'], now);
    const x = placed[0]!;
    // Refuses the first transaction that inserts an event, at its commit (a deferred trigger), as a
    // serializable transaction's check at commit does; a sequence, which no rollback undoes, counts.
    for (const q of [
      `create sequence refusals`,
      `create function refuse_once() returns trigger language plpgsql as $$ begin if nextval('refusals') = 1 then raise exception 'refused at commit' using errcode = '40001'; end if; return null; end $$`,
      `create constraint trigger refuse_once after insert on events deferrable initially deferred for each row execute function refuse_once()`,
    ])
      await store.db.executeQuery(CompiledQuery.raw(q));
    statements.reset();
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
    const counts = statements.snapshot();
    expect(counts.conflicts).toBe(1);
    expect(counts.byKind.get('START')).toBe(2);
    // Once each: the refused run wrote nothing that stayed.
    const events = await store.db.selectFrom('events').select('type').where('attempt_id', '=', x.id).execute();
    const types = events.map((e) => e.type);
    expect(types.length).toBeGreaterThan(0);
    expect(new Set(types).size).toBe(types.length);
    expect((await store.db.selectFrom('attempts').select('state').where('id', '=', x.id).executeTakeFirstOrThrow()).state).toBe('succeeded');
    // The trigger ran in both runs: the first was refused, not skipped.
    const seq = await store.db.executeQuery<{ n: number }>(CompiledQuery.raw(`select last_value as n from refusals`));
    expect(Number(seq.rows[0]!.n)).toBeGreaterThan(types.length);
  });

  it('an append that fails leaves no transaction open on its connection, and nothing of its transaction written', async () => {
    let pid = 0;
    // `now` NaN: its `at` is no bigint, and the append fails in PostgreSQL, before its commit.
    const failing = store.db
      .transaction()
      .setIsolationLevel('serializable')
      .execute(async (trx) => {
        pid = Number((await trx.executeQuery<{ pid: number }>(CompiledQuery.raw('select pg_backend_pid() as pid'))).rows[0]!.pid);
        await trx.insertInto('outbox').values({ topic: 'before', payload: '{}', created_at: 1, published_at: null }).execute();
        const ctx = new TxContext(trx, Number.NaN, true);
        await ctx.event({ type: 'test', message: 'fails' });
        await ctx.flush(true);
      });
    await expect(failing).rejects.toMatchObject({ code: '22P02' });
    const c = new pg.Client({ connectionString: POSTGRES_URL });
    await c.connect();
    try {
      const { rows } = await c.query(`select state from pg_stat_activity where pid = $1`, [pid]);
      expect(rows.map((row: { state: string }) => row.state)).toEqual(['idle']);
    } finally {
      await c.end();
    }
    expect(await store.db.selectFrom('outbox').select('topic').execute()).toEqual([]);
    expect(await messages()).toEqual([]);
    // The connections go on: a transaction after it commits.
    await appendTx('after');
    expect(await messages()).toEqual(['after']);
  });
});
