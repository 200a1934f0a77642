import type { Kysely, Migration } from 'kysely';

/**
 * Logs keep both ends (issue 28): an attempt's log past its head cap keeps the head and a tail, and
 * the bytes dropped between them are counted here. Null: the head never filled its cap (the whole
 * log is kept so far); 0: it did, nothing has been dropped yet; more: that many bytes of its files
 * were dropped between the head and the tail (the log says where, in a line of its own).
 */
export const migration0023LogCut: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('attempts').addColumn('log_cut_bytes', 'bigint').execute();
  },
};
