import SQLite from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrationProvider } from '../migrations.js';

/**
 * 0018 rebuilds `machines` on SQLite with foreign keys off for the swap. The rebuild checks the
 * references into machines before it commits: a database where one would dangle keeps its old
 * table, untouched, and its foreign keys back on.
 */
describe('migration 0018_converge_schema on SQLite', () => {
  it('refuses and rolls back when a reference into machines would dangle', async () => {
    const sqlite = new SQLite(':memory:');
    sqlite.pragma('foreign_keys = ON');
    const db = new Kysely<any>({ dialect: new SqliteDialect({ database: sqlite }) });
    const migrator = new Migrator({ db, provider: migrationProvider({ dialect: 'sqlite', skipLocked: false, singleWriter: true }) });
    try {
      expect((await migrator.migrateTo('0016_ready_queue_index')).error).toBeUndefined();
      const before = sqlite.prepare(`select sql from sqlite_master where name = 'machines'`).get();
      sqlite.pragma('foreign_keys = OFF');
      sqlite
        .prepare(
          `insert into attempts (id, stage_id, job_id, stage_name, number, token, machine_id, gpu_indices, cpu_millis, memory_bytes, state, scheduled_at)
           values ('att_1', 'stg_1', 'job_1', 'a', 1, 1, 'm_gone', '[]', 1, 1, 'failed', 1)`,
        )
        .run();
      sqlite.pragma('foreign_keys = ON');
      const r = await migrator.migrateToLatest();
      expect(String(r.error)).toMatch(/0018_converge_schema: rebuilding machines would break 1 references/);
      expect(sqlite.prepare(`select sql from sqlite_master where name = 'machines'`).get()).toEqual(before);
      expect(sqlite.prepare(`select name from sqlite_master where name = 'machines_new'`).get()).toBeUndefined();
      expect(sqlite.pragma('foreign_keys', { simple: true })).toBe(1);
      expect(sqlite.inTransaction).toBe(false);
    } finally {
      await db.destroy();
    }
  });
});
