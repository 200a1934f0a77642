import { type Kysely, type Migration, sql } from 'kysely';

/* Frozen (docs/store-contract.md, "Migrations"): machineLifecycles as this migration shipped. */
const MACHINE_LIFECYCLES = ['provisioning', 'joining', 'ready', 'draining', 'failed', 'released'];

function oneOf(column: string, values: readonly string[]) {
  return sql`${sql.ref(column)} in (${sql.join(values.map((v) => sql.lit(v)))})`;
}

/**
 * The autoscaler's memory (issue 30, docs/autoscaling.md "The store"): one row per machine it
 * started, written before the provider is asked, so a restarted server or a new leader sees every
 * start through from the rows, never from memory; and its latest word on each waiting stage it
 * starts nothing for, which `gantry explain` reads. Kept apart from `machines`: a row exists before
 * any agent registers, and outlives the machine's row being removed.
 */
export const migration0025Autoscale: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable('autoscaled_machines')
      .addColumn('name', 'text', (c) => c.primaryKey())
      .addColumn('pool', 'text', (c) => c.notNull())
      .addColumn('lifecycle', 'text', (c) => c.notNull().check(oneOf('lifecycle', MACHINE_LIFECYCLES)))
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('started_at', 'bigint', (c) => c.notNull())
      .addColumn('requested_at', 'bigint')
      .addColumn('provider_id', 'text')
      .addColumn('joined_at', 'bigint')
      .addColumn('machine_id', 'text')
      .addColumn('draining_at', 'bigint')
      .addColumn('released_at', 'bigint')
      .addColumn('stopped_at', 'bigint')
      .addColumn('fail_reason', 'text')
      // The stages it is held for, a JSON list of stage ids ([] for none).
      .addColumn('held_for', 'text', (c) => c.notNull().defaultTo('[]'))
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .execute();
    // The loop reads the rows not yet at their end each interval: released and stopped rows pile up.
    await db.schema
      .createIndex('autoscaled_machines_active')
      .on('autoscaled_machines')
      .columns(['pool', 'started_at'])
      .where(sql.ref('stopped_at'), 'is', null)
      .execute();
    await db.schema
      .createTable('autoscale_waits')
      .addColumn('stage_id', 'text', (c) => c.primaryKey())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('pool', 'text')
      .addColumn('at', 'bigint', (c) => c.notNull())
      .execute();
  },
};
