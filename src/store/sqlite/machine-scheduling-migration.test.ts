import SQLite from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';
import { migrationProvider } from '../migrations.js';
import type { Database } from '../schema.js';

/** 0005 moves an operator's cordon or drain out of `health` into `scheduling`, losing neither. */
describe('migration 0005_machine_scheduling', () => {
  it('keeps cordoned and draining machines so, with their health back to ready; the rest eligible', async () => {
    const sqlite = new SQLite(':memory:');
    const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) });
    const migrator = new Migrator({ db, provider: migrationProvider({ dialect: 'sqlite', skipLocked: false, singleWriter: true }) });
    try {
      expect((await migrator.migrateTo('0004_idempotency_keys')).error).toBeUndefined();
      // Rows as a database made before 0005 holds them: 0001's health constraint (frozen as it
      // shipped) admits these; 0018 narrows it once 0005 has moved them.
      const insert = sqlite.prepare(
        `insert into machines (id, name, cpu_millis, memory_bytes, gpus, gpus_declared, region, labels, health, agent, last_heartbeat_at, registered_at, updated_at)
         values (?, ?, 1000, 1000, '[]', 0, null, '{}', ?, '{}', 1, 1, 1)`,
      );
      for (const [id, health] of [
        ['m1', 'cordoned'],
        ['m2', 'draining'],
        ['m3', 'lost'],
        ['m4', 'ready'],
      ])
        insert.run(id, id, health);
      const latest = await migrator.migrateToLatest();
      expect(latest.error, String(latest.error)).toBeUndefined();
      const rows = sqlite.prepare('select id, health, scheduling from machines order by id').all();
      expect(rows).toEqual([
        { id: 'm1', health: 'ready', scheduling: 'cordoned' },
        { id: 'm2', health: 'ready', scheduling: 'draining' },
        { id: 'm3', health: 'lost', scheduling: 'eligible' },
        { id: 'm4', health: 'ready', scheduling: 'eligible' },
      ]);
      expect(() => sqlite.prepare(`update machines set scheduling = 'drained' where id = 'm1'`).run()).toThrow(/CHECK constraint/);
      expect(() => sqlite.prepare(`update machines set health = 'draining' where id = 'm1'`).run()).toThrow(/CHECK constraint/);
    } finally {
      await db.destroy();
    }
  });
});
