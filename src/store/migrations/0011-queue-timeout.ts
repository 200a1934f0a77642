import { type Kysely, type Migration, sql } from 'kysely';

/**
 * A stage's queueTimeoutSeconds, in ms, beside its row: the reconciler finds the ready stages past
 * it through a partial index that holds only stages that set one.
 */
export const migration0011QueueTimeout: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('stages').addColumn('queue_timeout_ms', 'bigint').execute();
    await sql`create index stages_queue_timeout on stages (state, ready_since) where queue_timeout_ms is not null`.execute(db);
  },
};
