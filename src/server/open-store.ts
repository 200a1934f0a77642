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
    try {
      return await openPostgresStore(config.databaseUrl, { ...opts, schema: process.env.GANTRY_DATABASE_SCHEMA || undefined });
    } catch (err) {
      const u = new URL(config.databaseUrl);
      throw new Error(`PostgreSQL at ${u.host}${u.pathname}: ${errorText(err)}`, { cause: err });
    }
  }
  const { openSqliteStore } = await import('../store/sqlite/open-sqlite-store.js');
  return openSqliteStore(databaseFile(config as ServerConfig), opts);
}
