import { type Kysely, type Migration, sql } from 'kysely';

/* Frozen (docs/store-contract.md, "Migrations"): the values as this migration shipped (dd9b49c). */
const MACHINE_SCHEDULINGS = ['eligible', 'cordoned', 'draining', 'removed'];

function oneOf(column: string, values: readonly string[]) {
  return sql`${sql.ref(column)} in (${sql.join(values.map((v) => sql.lit(v)))})`;
}

/**
 * What an operator wants of a machine (eligible, cordoned, draining, removed) gets its own column,
 * apart from its health (ready, suspect, lost), which heartbeats and the reconciler own: until
 * now `health` held both, so a draining machine that missed a heartbeat came back `ready`, and a
 * cordoned one that died was never found lost. A machine that was cordoned or draining keeps that
 * here, and its health restarts at `ready`: the reconciler judges its silence as any other's.
 * (`health`'s check constraint, built in 0001, still admits the two old values; 0018 narrows it.)
 */
export const migration0005MachineScheduling: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable('machines')
      .addColumn('scheduling', 'text', (c) => c.notNull().defaultTo('eligible').check(oneOf('scheduling', MACHINE_SCHEDULINGS)))
      .execute();
    await db
      .updateTable('machines')
      .set((eb) => ({ scheduling: eb.ref('health'), health: 'ready' }))
      .where('health', 'in', ['cordoned', 'draining'])
      .execute();
  },
};
