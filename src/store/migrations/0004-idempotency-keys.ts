import type { Kysely, Migration } from 'kysely';

/** A submit's Idempotency-Key, kept at least a day (the reconciler prunes older ones). */
export const migration0004IdempotencyKeys: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable('idempotency_keys')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('request_hash', 'text', (c) => c.notNull())
      .addColumn('job_ids', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('idempotency_keys_created').on('idempotency_keys').columns(['created_at']).execute();
  },
};
