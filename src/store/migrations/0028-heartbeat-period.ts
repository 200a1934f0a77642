import type { Kysely, Migration } from 'kysely';

/**
 * The heartbeat period each machine was last told (issue 32, docs/failure-detection.md "A period
 * that grows with the fleet"): the server grows the period with the fleet's size, and judges each
 * machine's silence by the period it is on. Null: the configured period (rows from before this
 * migration, machines that registered and have not heartbeated since).
 */
export const migration0028HeartbeatPeriod: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable('machines').addColumn('heartbeat_ms', 'integer').execute();
  },
};
