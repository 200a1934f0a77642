import { sql } from 'kysely';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { freshSchema, POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { cpuMachine } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { namedStatementsFromEnv } from '../../server/open-store.js';
import { nameStatements, statementName } from './named-statements.js';
import { dropPostgresSchema, openPostgresStore } from './open-postgres-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);

describe('named statements: which texts get a name', () => {
  it('reads and writes get one name per text; transaction control, savepoints, DDL and several statements in one text none', () => {
    const a = statementName('select "id" from "machines" where "id" = $1');
    expect(a).toMatch(/^gantry_\d+$/);
    expect(statementName('select "id" from "machines" where "id" = $1')).toBe(a);
    expect(statementName('select "id" from "machines" where "name" = $1')).not.toBe(a);
    for (const text of ['  WITH s AS (select 1) select * from s', 'insert into t values ($1)', 'update t set x = $1', 'delete from t where id = $1'])
      expect(statementName(text)).not.toBeNull();
    for (const text of ['start transaction isolation level serializable', 'commit', 'savepoint "sp_1"', 'create table t (x int)', 'select $1; select 2'])
      expect(statementName(text)).toBeNull();
  });

  it('GANTRY_DATABASE_NAMED_STATEMENTS: on names them, unset or off does not, anything else is refused by name', () => {
    expect(namedStatementsFromEnv(undefined)).toBe(false);
    expect(namedStatementsFromEnv('on')).toBe(true);
    expect(namedStatementsFromEnv('off')).toBe(false);
    expect(() => namedStatementsFromEnv('no')).toThrow('GANTRY_DATABASE_NAMED_STATEMENTS=no: on or off');
  });
});

describe.skipIf(pgMissing !== null)('named statements on PostgreSQL', () => {
  let store: KyselyStore | undefined;
  let schema = '';
  afterEach(async () => {
    await store?.close();
    store = undefined;
    await dropPostgresSchema(POSTGRES_URL, schema);
  });

  /** The store's statements prepared on its one connection, after the same verbs ran twice. */
  async function preparedAfterTwoRounds(namedStatements: boolean): Promise<string[]> {
    schema = freshSchema('named');
    store = await openPostgresStore(POSTGRES_URL, { schema, poolSize: 1, namedStatements });
    const now = 1_700_000_000_000;
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    for (let i = 0; i < 2; i++) {
      expect((await store.clusterView()).machines.map((x) => x.id)).toEqual([m.id]);
      await store.machineHeartbeat({ machineId: m.id, running: [], now: now + i, leaseMs: 10_000, missingAfterMs: 10_000, jitter: 0.5 });
    }
    const rows = await sql<{
      name: string;
      parameters: number;
    }>`select name, cardinality(parameter_types) as parameters from pg_prepared_statements order by name`.execute(store.db);
    return rows.rows.map((r) => `${r.name}/${r.parameters}`);
  }

  it('prepares each statement with parameters once on its connection, and none without', async () => {
    const names = await preparedAfterTwoRounds(true);
    expect(names.length).toBeGreaterThan(2);
    expect(names.every((n) => /^gantry_\d+\/[1-9]\d*$/.test(n))).toBe(true);
  });

  it('with namedStatements: false, prepares none', async () => {
    expect(await preparedAfterTwoRounds(false)).toEqual([]);
  });

  it("a statement whose table changed under it (another replica's migration) fails once, then runs unnamed everywhere", async () => {
    schema = freshSchema('named');
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 });
    pool.on('connect', (c) => nameStatements(c));
    // Kysely's driver runs `client.query(text, values)` on a client it holds, as here (the pool's own `query` passes a callback, left as it is).
    const c = await pool.connect();
    try {
      await c.query(`create schema ${schema}`);
      await c.query(`create table ${schema}.t (x int)`);
      await c.query(`insert into ${schema}.t values (1)`);
      const text = `select * from ${schema}.t where x = $1`;
      for (let i = 0; i < 2; i++) expect((await c.query(text, [1])).rows).toEqual([{ x: 1 }]);
      expect((await c.query('select name from pg_prepared_statements where statement = $1', [text])).rows).toHaveLength(1);
      await c.query(`alter table ${schema}.t add column y int default 2`);
      await expect(c.query(text, [1])).rejects.toMatchObject({ code: '0A000' });
      expect(statementName(text)).toBeNull();
      expect((await c.query(text, [1])).rows).toEqual([{ x: 1, y: 2 }]);
    } finally {
      c.release();
      await pool.end();
    }
  });
});
