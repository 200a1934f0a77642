import { type Kysely, type Migration, sql } from 'kysely';

/**
 * Gangs (issue 31, docs/gangs.md "Gangs in the store"): a gang's attempt is one row per member,
 * each on its own machine, linked by rank 0's attempt id (`gang_id`, the stage's current attempt)
 * with the member's rank and the gang's size. All three null on every other attempt, and on every
 * row before this migration. The partial index holds gang rows only: ending a gang reads its
 * members, and ordinary attempts pay nothing for it.
 */
export const migration0026Gangs: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('attempts').addColumn('gang_id', 'text').execute();
    await db.schema
      .alterTable('attempts')
      .addColumn('gang_rank', 'integer', (c) => c.check(sql`gang_rank is null or gang_rank >= 0`))
      .execute();
    await db.schema
      .alterTable('attempts')
      .addColumn('gang_size', 'integer', (c) => c.check(sql`gang_size is null or gang_size >= 2`))
      .execute();
    await sql`create index attempts_gang on attempts (gang_id) where gang_id is not null`.execute(db);
  },
};
