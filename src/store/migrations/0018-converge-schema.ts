import { type Kysely, type Migration, sql } from 'kysely';

/*
 * Frozen (docs/store-contract.md, "Migrations"): the values below are literals, as this migration
 * shipped; a later change of the domain's lists is a later migration.
 */
const MACHINE_HEALTHS = ['ready', 'suspect', 'lost'];
const MACHINE_SCHEDULINGS = ['eligible', 'cordoned', 'draining', 'removed'];

function oneOf(column: string, values: readonly string[]) {
  return sql`${sql.ref(column)} in (${sql.join(values.map((v) => sql.lit(v)))})`;
}

/**
 * One schema for every database, however it got here. Until the migrations were frozen, 0001
 * built its check constraints from the domain's lists of the day and 0003 was edited after it
 * shipped, so databases of different ages held different schemas under the same migration names:
 *
 * - `machines.health` admitted 'draining' and 'cordoned' on databases made before dd9b49c (0005
 *   moved those values into `scheduling`; nothing writes them since) and refused them on the ones
 *   made after. It now refuses them everywhere.
 * - A database that ran 0003 at afdf4e3 got `stages_ready_shape` instead of `stages_state_shape`
 *   (0016, which replaced the latter, now tolerates its absence); it is dropped here.
 */
export function migration0018ConvergeSchema(dialect: 'sqlite' | 'postgres'): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`drop index if exists stages_ready_shape`.execute(db);
      // As 0005 did: a value the narrower check refuses cannot be left behind (none should be).
      await db
        .updateTable('machines')
        .set((eb) => ({ scheduling: eb.ref('health'), health: 'ready' }))
        .where('health', 'in', ['cordoned', 'draining'])
        .execute();
      if (dialect === 'postgres') {
        // PostgreSQL named 0001's column check `machines_health_check`; the new one keeps the name.
        await sql`alter table machines drop constraint if exists machines_health_check`.execute(db);
        await sql`alter table machines add constraint machines_health_check check (${oneOf('health', MACHINE_HEALTHS)})`.execute(db);
      } else {
        await rebuildMachinesOnSqlite(db);
      }
    },
  };
}

/**
 * SQLite cannot alter a check constraint: the table is rebuilt as its documentation says (create
 * the new one, copy, drop the old, rename, recreate the indexes), with foreign keys off for the
 * swap, since attempts and tokens reference machines and dropping it would otherwise fail. Kysely
 * runs SQLite's migrations outside a transaction (the pragma is a no-op inside one), so this opens
 * its own, checks the references before committing, and puts the pragma back as it found it.
 */
async function rebuildMachinesOnSqlite(db: Kysely<any>): Promise<void> {
  const fk = await sql<{ foreign_keys: number }>`pragma foreign_keys`.execute(db);
  const foreignKeys = fk.rows[0]?.foreign_keys === 1;
  if (foreignKeys) await sql`pragma foreign_keys = off`.execute(db);
  try {
    await sql`begin immediate`.execute(db);
    try {
      await sql`drop table if exists machines_new`.execute(db);
      await db.schema
        .createTable('machines_new')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull().unique())
        .addColumn('cpu_millis', 'bigint', (c) => c.notNull())
        .addColumn('memory_bytes', 'bigint', (c) => c.notNull())
        .addColumn('gpus', 'text', (c) => c.notNull())
        .addColumn('gpus_declared', 'integer', (c) => c.notNull())
        .addColumn('region', 'text')
        .addColumn('labels', 'text', (c) => c.notNull())
        .addColumn('health', 'text', (c) => c.notNull().check(oneOf('health', MACHINE_HEALTHS)))
        .addColumn('agent', 'text', (c) => c.notNull())
        .addColumn('last_heartbeat_at', 'bigint', (c) => c.notNull())
        .addColumn('registered_at', 'bigint', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .addColumn('scheduling', 'text', (c) => c.notNull().defaultTo('eligible').check(oneOf('scheduling', MACHINE_SCHEDULINGS)))
        .execute();
      const columns = sql.join(
        [
          'id',
          'name',
          'cpu_millis',
          'memory_bytes',
          'gpus',
          'gpus_declared',
          'region',
          'labels',
          'health',
          'agent',
          'last_heartbeat_at',
          'registered_at',
          'updated_at',
          'scheduling',
        ].map((c) => sql.ref(c)),
      );
      await sql`insert into machines_new (${columns}) select ${columns} from machines`.execute(db);
      await sql`drop table machines`.execute(db);
      await sql`alter table machines_new rename to machines`.execute(db);
      // The old table's one named index (0002); the unique name's is made with the table.
      await db.schema.createIndex('machines_updated').on('machines').columns(['updated_at']).execute();
      // The references into machines only (attempts', tokens'): a violation elsewhere, were there
      // one, is not this migration's to judge.
      const broken: unknown[] = [];
      for (const table of ['attempts', 'tokens']) {
        const r = await sql<{ parent: string }>`pragma foreign_key_check(${sql.raw(table)})`.execute(db);
        broken.push(...r.rows.filter((row) => row.parent === 'machines'));
      }
      if (broken.length > 0)
        throw new Error(`0018_converge_schema: rebuilding machines would break ${broken.length} references: ${JSON.stringify(broken.slice(0, 5))}`);
      await sql`commit`.execute(db);
    } catch (err) {
      await sql`rollback`.execute(db);
      throw err;
    }
  } finally {
    if (foreignKeys) await sql`pragma foreign_keys = on`.execute(db);
  }
}
