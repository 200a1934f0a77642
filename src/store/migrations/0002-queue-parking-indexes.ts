import { type Kysely, type Migration, sql } from 'kysely';

/**
 * Indexes for the queries the passes really run (found by reading their plans); parking: a ready
 * stage no machine could run waits out of the queue's head until the cluster changes, so a wall
 * of unplaceable stages cannot hide placeable ones behind it; and a per-attempt log byte count.
 */
export const migration0002QueueParkingIndexes: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('stages').addColumn('parked_at', 'bigint').execute();
    await db.schema
      .alterTable('attempts')
      .addColumn('log_bytes', 'bigint', (c) => c.notNull().defaultTo(0))
      .execute();
    await db.schema.dropIndex('stages_queue').execute();
    // Priority descending as the scheduler reads it, so a pass reads the head without sorting.
    await sql`create index stages_queue on stages (state, pool, priority desc, ready_since)`.execute(db);
    // What machines hold: attempts not yet released, a small set however long the history.
    await db.schema.dropIndex('attempts_machine_held').execute();
    await sql`create index attempts_held on attempts (machine_id) where released_at is null`.execute(db);
    await db.schema.createIndex('attempts_job').on('attempts').columns(['job_id']).execute();
    await db.schema.createIndex('jobs_state_updated').on('jobs').columns(['state', 'updated_at']).execute();
    await db.schema.createIndex('machines_updated').on('machines').columns(['updated_at']).execute();
  },
};
