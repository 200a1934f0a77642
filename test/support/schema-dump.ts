import type SQLite from 'better-sqlite3';
import type pg from 'pg';

/**
 * A database's schema as sorted lines of text, for comparing two databases (one made fresh, one
 * upgraded step by step) and a database against the committed snapshot in test/fixtures/schema/.
 * The migrator's own tables are left out: they record history, which differs by design.
 */
const MIGRATOR_TABLES = /^kysely_migration/;

/** SQL text with its layout taken out: whitespace runs become one space, none beside punctuation. */
function normalized(text: string): string {
  return text
    .replace(/\s+/g, ' ')
    .replace(/\s*([(),])\s*/g, '$1')
    .trim();
}

/** SQLite: each object's SQL, then what the pragmas report of each table (columns, indexes, foreign keys). */
export function sqliteSchema(db: SQLite.Database): string {
  const objects = db.prepare(`select type, name, tbl_name, sql from sqlite_master where name not like 'sqlite_%' order by type, name`).all() as {
    type: string;
    name: string;
    tbl_name: string;
    sql: string | null;
  }[];
  const lines: string[] = [];
  for (const o of objects) {
    if (MIGRATOR_TABLES.test(o.tbl_name)) continue;
    lines.push(`${o.type} ${o.name} on ${o.tbl_name}: ${o.sql === null ? '(automatic)' : normalized(o.sql)}`);
    if (o.type !== 'table') continue;
    for (const c of db.pragma(`table_info(${quoted(o.name)})`) as {
      cid: number;
      name: string;
      type: string;
      notnull: number;
      dflt_value: string | null;
      pk: number;
    }[]) {
      lines.push(
        `column ${o.name}.${c.name}: #${c.cid} ${c.type}${c.notnull ? ' not null' : ''}${c.dflt_value === null ? '' : ` default ${c.dflt_value}`}${c.pk ? ` pk${c.pk}` : ''}`,
      );
    }
    for (const i of db.pragma(`index_list(${quoted(o.name)})`) as { name: string; unique: number; origin: string; partial: number }[]) {
      const cols = (db.pragma(`index_xinfo(${quoted(i.name)})`) as { name: string | null; desc: number; key: number }[])
        .filter((c) => c.key === 1)
        .map((c) => `${c.name ?? '(expression)'}${c.desc ? ' desc' : ''}`);
      // An automatic index's name counts its table's constraints: the order they were declared in, not a schema difference.
      const name = i.origin === 'c' ? i.name : `(${i.origin}) ${i.name.startsWith('sqlite_autoindex_') ? 'auto' : i.name}`;
      lines.push(`index of ${o.name}: ${name} (${cols.join(', ')})${i.unique ? ' unique' : ''}${i.partial ? ' partial' : ''}`);
    }
    for (const f of db.pragma(`foreign_key_list(${quoted(o.name)})`) as {
      table: string;
      from: string;
      to: string | null;
      on_update: string;
      on_delete: string;
    }[]) {
      lines.push(`foreign key ${o.name}.${f.from} -> ${f.table}.${f.to ?? '(primary key)'} on update ${f.on_update} on delete ${f.on_delete}`);
    }
  }
  return lines.sort().join('\n') + '\n';
}

function quoted(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * PostgreSQL: columns (information_schema), constraints (pg_get_constraintdef) and indexes
 * (pg_indexes) of one schema, with the schema's name written as `<schema>` so that two test
 * schemas compare equal.
 */
export async function postgresSchema(client: pg.Client | pg.Pool, schema: string): Promise<string> {
  const lines: string[] = [];
  const columns = await client.query<{
    table_name: string;
    column_name: string;
    ordinal_position: number;
    data_type: string;
    is_nullable: string;
    column_default: string | null;
  }>(
    `select table_name, column_name, ordinal_position, data_type, is_nullable, column_default
       from information_schema.columns where table_schema = $1`,
    [schema],
  );
  for (const c of columns.rows) {
    if (MIGRATOR_TABLES.test(c.table_name)) continue;
    lines.push(
      `column ${c.table_name}.${c.column_name}: #${c.ordinal_position} ${c.data_type}${c.is_nullable === 'NO' ? ' not null' : ''}${c.column_default === null ? '' : ` default ${c.column_default}`}`,
    );
  }
  const constraints = await client.query<{ table_name: string; conname: string; contype: string; def: string }>(
    `select cl.relname as table_name, co.conname, co.contype, pg_get_constraintdef(co.oid) as def
       from pg_constraint co join pg_class cl on cl.oid = co.conrelid join pg_namespace n on n.oid = cl.relnamespace
      where n.nspname = $1`,
    [schema],
  );
  for (const c of constraints.rows) {
    if (MIGRATOR_TABLES.test(c.table_name)) continue;
    lines.push(`constraint ${c.table_name}.${c.conname} (${c.contype}): ${c.def}`);
  }
  const indexes = await client.query<{ tablename: string; indexname: string; indexdef: string }>(
    `select tablename, indexname, indexdef from pg_indexes where schemaname = $1`,
    [schema],
  );
  for (const i of indexes.rows) {
    if (MIGRATOR_TABLES.test(i.tablename)) continue;
    lines.push(`index ${i.tablename}.${i.indexname}: ${i.indexdef}`);
  }
  // Triggers (SQLite's are in sqlite_master above): what a change of the rows writes besides itself.
  const triggers = await client.query<{ table_name: string; tgname: string; def: string }>(
    `select cl.relname as table_name, t.tgname, pg_get_triggerdef(t.oid) as def
       from pg_trigger t join pg_class cl on cl.oid = t.tgrelid join pg_namespace n on n.oid = cl.relnamespace
      where n.nspname = $1 and not t.tgisinternal`,
    [schema],
  );
  for (const t of triggers.rows) lines.push(`trigger ${t.table_name}.${t.tgname}: ${t.def}`);
  return (
    lines
      .map((l) => l.replaceAll(`${schema}.`, '<schema>.'))
      .sort()
      .join('\n') + '\n'
  );
}
