import type pg from 'pg';

type Query = (...args: unknown[]) => unknown;

/**
 * Makes `client` answer a text of several statements with every statement's rows (for a pool's
 * `connect` event): the narrow path by which the store sends a pass's reads in one round trip
 * (kysely/pass-reads.ts).
 *
 * Why here: `pg` answers such a text (sent without parameters, so in the simple protocol) with an
 * array of results, one a statement; Kysely's PostgreSQL driver reads `rows` of what it gets, and
 * of an array that is nothing. So an array answer becomes one result whose rows are the
 * statements' rows, in order, which Kysely passes through. Every other answer, and every other
 * form of call, is left as it was: only a multi-statement text is answered with an array.
 */
export function answerEveryResult(client: pg.ClientBase): void {
  const target = client as unknown as { query: Query };
  const query: Query = target.query.bind(client);
  target.query = (...args: unknown[]) => {
    const out = query(...args);
    if (!(out instanceof Promise)) return out;
    return out.then((r: unknown) => (Array.isArray(r) ? { command: 'SELECT', rowCount: r.length, rows: (r as pg.QueryResult[]).map((x) => x.rows) } : r));
  };
}
