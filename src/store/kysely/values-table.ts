import { type RawBuilder, sql } from 'kysely';

/**
 * A list of rows as a table both dialects read: `(values (…), (…)) as v`, its columns `v.column1`,
 * `v.column2`… (the names SQLite and PostgreSQL both give a VALUES list's columns). Each value is
 * cast to its column's type: PostgreSQL types a bound parameter in a VALUES list as text otherwise.
 */
export function valuesTable(values: readonly unknown[], types: readonly string[], rows: number) {
  const row = (r: number) => sql`(${sql.join(types.map((t, c) => sql`cast(${values[r * types.length + c]} as ${sql.raw(t)})`))})`;
  return sql`(values ${sql.join(Array.from({ length: rows }, (_, r) => row(r)))})`.as('v');
}
/** Column `n` (from 1) of valuesTable's rows. */
export const v = (column: number): RawBuilder<never> => sql.raw(`v.column${column}`);
