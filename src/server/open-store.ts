import type { KyselyStore } from '../store/kysely/kysely-store.js';
import { databaseFile, type ServerConfig } from './server-config.js';
import { errorText } from '../lib/error-text.js';

/**
 * The store the config names: PostgreSQL at `databaseUrl`, else the SQLite file in the data
 * directory. Migrations run on open (`gantry migrate` runs them alone). Each adapter is loaded
 * only when chosen: a SQLite server never loads pg, a PostgreSQL one never opens a file.
 */
export async function openStore(config: Pick<ServerConfig, 'dataDir' | 'databaseUrl'>, opts: { migrate?: boolean } = {}): Promise<KyselyStore> {
  if (config.databaseUrl) {
    const { openPostgresStore } = await import('../store/postgres/open-postgres-store.js');
    const namedStatements = namedStatementsFromEnv(process.env.GANTRY_DATABASE_NAMED_STATEMENTS);
    try {
      return await openPostgresStore(config.databaseUrl, {
        ...opts,
        schema: process.env.GANTRY_DATABASE_SCHEMA || undefined,
        namedStatements,
      });
    } catch (err) {
      const u = new URL(config.databaseUrl);
      throw new Error(`PostgreSQL at ${u.host}${u.pathname}: ${errorText(err)}`, { cause: err });
    }
  }
  const { openSqliteStore } = await import('../store/sqlite/open-sqlite-store.js');
  return openSqliteStore(databaseFile(config as ServerConfig), opts);
}

/**
 * GANTRY_DATABASE_NAMED_STATEMENTS: `on` prepares the store's statements with parameters once per
 * connection (named-statements.ts: PostgreSQL's CPU a statement 0.31 → 0.25 ms in the one run
 * measured on the throughput bench; not on by default until ready → running with a backlog is
 * shown no worse, docs/throughput.md);
 * `off` or unset: sent unnamed, as Kysely sends them. Never `on` behind a pooler whose connections
 * are not a client's own (PgBouncer in transaction mode).
 */
export function namedStatementsFromEnv(value: string | undefined): boolean {
  if (value === undefined || value === '' || value === 'off') return false;
  if (value === 'on') return true;
  throw new Error(`GANTRY_DATABASE_NAMED_STATEMENTS=${value}: on or off`);
}
