import { type RawBuilder, sql } from 'kysely';
import type { PreparedQuery } from './prepared-query.js';
import type { TxContext } from './tx-context.js';

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

/**
 * Runs a set-based write (a statement per number of rows, each taking the transaction's time and
 * then its rows' values, as valuesTable lays them out) over `rows`, `perStatement` at a time;
 * answers the ids its guarded update changed.
 */
export async function writeRows(
  tx: TxContext,
  statement: (n: number) => PreparedQuery<unknown[], { id: string }>,
  rows: readonly (readonly unknown[])[],
  perStatement: number,
): Promise<Set<string>> {
  const changed = new Set<string>();
  for (let i = 0; i < rows.length; i += perStatement) {
    const part = rows.slice(i, i + perStatement);
    for (const r of await statement(part.length).rows(tx.db, tx.now, ...part.flat())) changed.add(r.id);
  }
  return changed;
}

/**
 * The first column of valuesTable's rows (their keys), for a set-based write's `where id in (…)`
 * beside its join on `v.column1`: PostgreSQL then finds the rows through the table's primary key
 * (an index scan on the list) rather than joining the list to a scan of the whole table, which
 * SERIALIZABLE records as a read of every row and any concurrent write to the table then conflicts
 * with (a reaper's batch of 100 against the fleet's heartbeats; docs/failure-detection.md, "A
 * batch's losses set-based"). The same arguments, bound twice.
 */
export function keysOf(values: readonly unknown[], types: readonly string[], rows: number): string[] {
  return Array.from({ length: rows }, (_, r) => values[r * types.length] as string);
}
