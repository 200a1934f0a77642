import SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { KyselyStore } from '../../src/store/kysely/kysely-store.js';
import type { Database } from '../../src/store/schema.js';
import { cachingDatabase, directConnection } from '../../src/store/sqlite/statement-cache.js';

/**
 * A migrated in-memory SQLite store that writes set-based as PostgreSQL does
 * (StoreCapabilities.setBasedWrites, off on SQLite in the server): so that tests prove the
 * set-based statements on both dialects, and not only where they are used.
 */
export async function setBasedSqliteStore(): Promise<KyselyStore> {
  const sqlite = new SQLite(':memory:');
  sqlite.pragma('foreign_keys = ON');
  const cached = cachingDatabase(sqlite);
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: cached }) });
  const store = new KyselyStore(db, { dialect: 'sqlite', skipLocked: false, singleWriter: true, setBasedWrites: true }, undefined, directConnection(cached));
  await store.migrate();
  return store;
}
