import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { KyselyStore } from '../kysely/kysely-store.js';
import type { Database } from '../schema.js';
import { cachingDatabase, directConnection } from './statement-cache.js';

/**
 * The embedded default: one SQLite file in WAL mode. One connection serialises writers, which is
 * what SQLite does anyway; `busy_timeout` covers a second process (a restarting server) briefly
 * holding the file.
 */
export async function openSqliteStore(file: string, opts: { migrate?: boolean } = {}): Promise<KyselyStore> {
  if (file !== ':memory:') mkdirSync(dirname(file), { recursive: true });
  const sqlite = new SQLite(file);
  sqlite.pragma('journal_mode = WAL');
  // FULL: a commit survives power loss, not just a crash of the process; accepted means durable.
  // GANTRY_SQLITE_SYNC=NORMAL trades that for fewer fsyncs; for measurements, not for production.
  const sync = (process.env.GANTRY_SQLITE_SYNC ?? 'FULL').toUpperCase();
  if (!['FULL', 'NORMAL', 'EXTRA'].includes(sync)) throw new Error(`GANTRY_SQLITE_SYNC must be FULL, NORMAL or EXTRA, not "${sync}"`);
  sqlite.pragma(`synchronous = ${sync}`);
  sqlite.pragma('foreign_keys = ON');
  sqlite.pragma('busy_timeout = 5000');
  // Every store call of a group commit runs under a savepoint, and SQLite keeps the pages a
  // savepoint could roll back in a sub-journal that lives for the whole transaction. Past 64 KiB
  // (a group of a few reports) it spilled into a temporary file it created, wrote and deleted in
  // /var/tmp every transaction: half the server's writes and a file created per commit (strace).
  // In memory it holds what the transaction touched, at most a few MiB; nothing durable is in it.
  sqlite.pragma('temp_store = MEMORY');
  const cached = cachingDatabase(sqlite);
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: cached }) });
  const store = new KyselyStore(db, { dialect: 'sqlite', skipLocked: false, singleWriter: true }, undefined, directConnection(cached));
  if (opts.migrate !== false) await store.migrate();
  return store;
}
