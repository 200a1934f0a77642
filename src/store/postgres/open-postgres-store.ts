import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { KyselyStore } from '../kysely/kysely-store.js';
import { answerEveryResult } from './multi-results.js';
import { commitWithAppend } from './append-and-commit.js';
import { nameStatements } from './named-statements.js';
import type { Database } from '../schema.js';

/** PostgreSQL's type ids whose text the store reads as numbers (the schema's times and counters). */
const INT8 = 20;
const NUMERIC = 1700;

/**
 * Types for this pool only (not pg's global parsers, which every other pg user in the process
 * shares): `bigint` columns and `count(*)` come back as strings by default, so that values past
 * 2^53 are not rounded. The store's bigints are milliseconds since the epoch, byte counts and
 * sequence numbers, all far below 2^53, so they are read as numbers once, here.
 */
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8 || oid === NUMERIC) return (v: string) => Number(v);
    return pg.types.getTypeParser(oid, format);
  },
};

export interface PostgresStoreOptions {
  /** Run the migrations on open (default). Several replicas may open at once: the migrator takes an advisory lock. */
  migrate?: boolean;
  /** A schema to keep the tables in (created if missing); default: the connection's search_path (`public`). */
  schema?: string;
  /** Connections in the pool (default 10). */
  poolSize?: number;
  /**
   * Statements with parameters prepared once per connection (named-statements.ts; default false:
   * GANTRY_DATABASE_NAMED_STATEMENTS=on). Never behind a pooler whose connections are not a
   * client's own (PgBouncer in transaction mode).
   */
  namedStatements?: boolean;
}

/**
 * The store on PostgreSQL: the same KyselyStore as SQLite's, with its capability flags saying
 * that several writers run at once. How the shared code stays correct under them is
 * docs/store-contract.md.
 */
/** The leader's own connections (its lease, its loops' transactions): two loops in flight and the lease's renewal beside them. */
const CONTROL_POOL_SIZE = 3;

export async function openPostgresStore(url: string, opts: PostgresStoreOptions = {}): Promise<KyselyStore> {
  const schema = opts.schema;
  if (schema !== undefined) checkSchemaName(schema);
  if (schema) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      await c.query(`create schema if not exists ${schema}`);
    } finally {
      await c.end();
    }
  }
  // Named once the migrations below ran (named-statements.ts): none prepared against a table they change.
  let named = false;
  const poolOf = (max: number) => {
    const pool = new pg.Pool({
      connectionString: url,
      max,
      types,
      ...(schema ? { options: `-c search_path=${schema}` } : {}),
    });
    // An idle connection the server dropped (a restart, a failover) must not crash the process:
    // the pool discards it and the next query opens a new one.
    pool.on('error', () => {});
    pool.on('connect', answerEveryResult);
    if (opts.namedStatements === true) pool.on('connect', (client) => nameStatements(client, () => named));
    // Last, outside the others: it reads the text as Kysely sent it (its fused append goes unnamed).
    pool.on('connect', (client) => commitWithAppend(client, types));
    return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  };
  const db = poolOf(opts.poolSize ?? 10);
  const store = new KyselyStore(
    db,
    { dialect: 'postgres', skipLocked: true, singleWriter: false, setBasedWrites: true, multiStatementReads: true, readsOutsideTransactions: true },
    schema ?? 'public',
  );
  // The leader's lane (KyselyStore.useControlPool): three connections of its own.
  store.useControlPool(poolOf(CONTROL_POOL_SIZE));
  // The lease's claim on a connection of its own, queued behind none of the lane's work.
  store.useLeaseConnection(poolOf(1));
  try {
    if (opts.migrate !== false) await store.migrate();
    named = true;
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}

/** A schema name goes into SQL text (DDL takes no parameters): only a plain identifier is let through. */
function checkSchemaName(schema: string): void {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) throw new Error(`PostgreSQL schema name "${schema}": lower-case letters, digits and _ only`);
}

/** Drops a schema and everything in it: for tests that made one each. */
export async function dropPostgresSchema(url: string, schema: string): Promise<void> {
  checkSchemaName(schema);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`drop schema if exists ${schema} cascade`);
  } finally {
    await c.end();
  }
}
