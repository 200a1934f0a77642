import { randomBytes } from 'node:crypto';
import type { Kysely, Migration } from 'kysely';

/**
 * The leader lease of the replicas (docs/replicas.md): one row, taken over when it expires, its
 * term counting the holders, so that a deposed leader's late write is refused.
 */
export const migration0010Leader: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable('leader')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('holder', 'text')
      .addColumn('term', 'bigint', (c) => c.notNull())
      .addColumn('expires_at', 'bigint', (c) => c.notNull())
      .execute();
    await db.insertInto('leader').values({ name: 'control', holder: null, term: 0, expires_at: 0 }).execute();
    // This database's own name, made once: messages on a bus shared with other installations
    // carry it, so theirs never wake ours and outbox ids (which restart with a new database)
    // never collide in the bus's de-duplication.
    await db.schema
      .createTable('installation')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .execute();
    await db
      .insertInto('installation')
      .values({ id: randomBytes(8).toString('hex') })
      .execute();
  },
};
