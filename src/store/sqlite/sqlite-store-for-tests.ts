import type SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { KyselyStore } from '../kysely/kysely-store.js';
import type { Database } from '../schema.js';
import { cachingDatabase, directConnection } from './statement-cache.js';

/**
 * A SQLite store for tests that watch its statements: every statement Kysely runs goes to `log`
 * (`begin` and `commit` among them; with `direct`, the group's own statements go straight to the
 * connection, as in the server, and are not seen). `direct: false` runs everything through Kysely,
 * where a group uses savepoints always (group-commit.ts).
 */
export function sqliteStoreForTests(sqlite: SQLite.Database, opts: { direct: boolean; log?: (sql: string) => void; setBasedWrites?: boolean }): KyselyStore {
  const cached = cachingDatabase(sqlite);
  const db = new Kysely<Database>({
    dialect: new SqliteDialect({ database: cached }),
    log: (e) => {
      if (e.level === 'query') opts.log?.(e.query.sql);
    },
  });
  return new KyselyStore(
    db,
    { dialect: 'sqlite', skipLocked: false, singleWriter: true, ...(opts.setBasedWrites ? { setBasedWrites: true } : {}) },
    undefined,
    opts.direct ? directConnection(cached) : undefined,
  );
}
