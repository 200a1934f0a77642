import type { Kysely, Migration } from 'kysely';

/**
 * Indexes that every stage rewrites and no query needs: each is a b-tree written on the attempt's
 * insert and moved at each of its state changes (docs/throughput.md). A stage's attempts are
 * found through the unique (stage_id, token); a machine's active ones through attempts_held
 * (active implies not yet released); ended jobs for retention through jobs_state_created's state,
 * as they were through this one's.
 */
export const migration0015WriteOnlyIndexes: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.dropIndex('attempts_stage').execute();
    await db.schema.dropIndex('attempts_machine_state').execute();
    await db.schema.dropIndex('jobs_state_updated').execute();
  },
};
