import type { Kysely, Migration } from 'kysely';

/**
 * Logs delivered at least once, stored exactly once: each piece carries its byte offset in its
 * stream's file; the attempt keeps how far each stream has come, and the unique index makes a
 * second copy of a piece impossible whatever the caller checked.
 */
export const migration0006LogOffsets: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('log_chunks').addColumn('byte_offset', 'bigint').execute();
    await db.schema
      .alterTable('attempts')
      .addColumn('stdout_bytes', 'bigint', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema
      .alterTable('attempts')
      .addColumn('stderr_bytes', 'bigint', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.createIndex('log_chunks_piece').on('log_chunks').columns(['attempt_id', 'stream', 'byte_offset']).unique().execute();
  },
};
