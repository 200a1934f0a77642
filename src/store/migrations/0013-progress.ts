import type { Kysely, Migration } from 'kysely';

/** What a running stage says of its progress, forwarded by its agent with heartbeats. */
export const migration0013Progress: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('attempts').addColumn('progress', 'real').execute();
    await db.schema.alterTable('attempts').addColumn('progress_message', 'text').execute();
    await db.schema.alterTable('attempts').addColumn('progress_at', 'bigint').execute();
  },
};
