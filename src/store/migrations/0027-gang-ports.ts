import { type Kysely, type Migration, sql } from 'kysely';

/**
 * A gang's reserved master port (issue 31, docs/gangs.md "Rendezvous"): the port of rank 0's
 * machine the server chose for the gang when it placed it, from the range that machine's agent
 * offered, written on every member's row so that all of them, and any reader after a restart, see
 * the same one. Null on every other attempt, and on gang rows from before this migration (they are
 * given the port derived from the gang, as their version did).
 */
export const migration0027GangPorts: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable('attempts')
      .addColumn('gang_master_port', 'integer', (c) => c.check(sql`gang_master_port is null or (gang_master_port >= 1 and gang_master_port <= 65535)`))
      .execute();
  },
};
