import { type Kysely, type Migration, sql } from 'kysely';

/*
 * Frozen (docs/store-contract.md, "Migrations"): the columns below are literals, as this migration
 * shipped. A later column that the cluster's view reads is a later migration that replaces the
 * triggers.
 */
const VIEW_COLUMNS = ['name', 'health', 'scheduling', 'region', 'labels', 'cpu_millis', 'memory_bytes', 'gpus'];

/**
 * A machine's revision (issue 32; docs/scheduling.md, "The cluster's view, kept"): a counter on its
 * row that grows by one with every change of what the scheduler's view of the cluster reads
 * (name, health, scheduling, region, labels, capacity, GPUs), made by a trigger in the same
 * statement as the change, whichever code path writes it. Machines are never deleted (a removal
 * is `scheduling = 'removed'`), so the cluster's version, the row count plus the revisions' sum,
 * grows with every insert and every such change, and a server that holds the view of an equal
 * version holds the same rows. Heartbeats' writes (last_heartbeat_at, heartbeat_ms) change no
 * revision. The index lets the version be read from the index alone on SQLite.
 */
export function migration0029MachineRevision(dialect: 'sqlite' | 'postgres'): Migration {
  const changed = sql.raw(VIEW_COLUMNS.map((c) => `old.${c} is distinct from new.${c}`).join(' or '));
  return {
    async up(db: Kysely<any>) {
      await db.schema
        .alterTable('machines')
        .addColumn('revision', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
      await sql`create index machines_revision on machines (revision)`.execute(db);
      if (dialect === 'postgres') {
        await sql`create function machines_revision() returns trigger language plpgsql as $$
          begin
            new.revision := old.revision + 1;
            return new;
          end $$`.execute(db);
        await sql`create trigger machines_revision before update on machines for each row when (${changed})
          execute function machines_revision()`.execute(db);
      } else {
        // SQLite writes `is not` for PostgreSQL's `is distinct from`; the trigger's own update names only revision,
        // so it does not fire itself (and recursive triggers are off).
        const changedSqlite = sql.raw(VIEW_COLUMNS.map((c) => `old.${c} is not new.${c}`).join(' or '));
        await sql`create trigger machines_revision after update of ${sql.raw(VIEW_COLUMNS.join(', '))} on machines for each row when ${changedSqlite}
          begin update machines set revision = old.revision + 1 where id = new.id; end`.execute(db);
      }
    },
  };
}
