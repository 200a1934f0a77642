import type { Kysely, Migration } from 'kysely';

/**
 * Every index is rewritten by the writes that change its columns: a stage changes state four or
 * five times, and each change re-keyed stages_queue, which no query has read since queues by
 * shape (0003). stages_job becomes (job_id, position): a job's stages are read in position order
 * several times per stage's life, and were sorted each time. (An index leading with job_id must
 * stay beside the unique (job_id, name): without one, SQLite's planner, which has no statistics
 * here, reads `job_id = ? and state = ?` from stages_state_shape.)
 */
export const migration0007StageIndexes: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.dropIndex('stages_queue').execute();
    await db.schema.dropIndex('stages_job').execute();
    await db.schema.createIndex('stages_job').on('stages').columns(['job_id', 'position']).execute();
  },
};
