import type pg from 'pg';

/**
 * Statements sent as named prepared statements, so that PostgreSQL parses each text once per
 * connection instead of once per run (docs/throughput.md, "PostgreSQL: where it stands").
 *
 * Why: Kysely sends every statement unnamed, which PostgreSQL parses, analyzes and plans anew
 * each time. On the throughput bench, measured with pg_stat_statements, planning alone took 0.37
 * ms of PostgreSQL's time a stage against 0.89 ms of executing (the scheduler pass's reads are
 * joins planned in more time than they run). A named statement is parsed once per connection;
 * after five runs PostgreSQL keeps a generic plan where that costs no more than the plans it made
 * with the values (plan_cache_mode = auto).
 *
 * Only statements with parameters. One without is planned once and that plan kept whatever the
 * mode, until its tables' statistics change: with autovacuum off (as on this project's test
 * services), the ready shapes' walk planned when the queue was empty kept that plan with 100,000
 * stages waiting (6.2 ms a run instead of 0.13; ready → running p99 94 ms, results file run 12).
 * Forcing a plan with the values at every run instead (plan_cache_mode = force_custom_plan) was
 * tried: it also replans every foreign-key check PostgreSQL runs for the store's inserts (100,205
 * plans, 0.7 s, in one run), which the default caches.
 *
 * Which: reads and writes with parameters (`select`, `insert`, `update`, `delete`, `with`), one
 * statement a text, and the first MAX_NAMED distinct texts a process sends: the store's texts are bounded
 * (prepared-query.ts cuts each list at 64 items), and the cap bounds what each connection keeps
 * should anything send texts without end. Transaction control, savepoints and DDL go unnamed.
 *
 * Off by default (openPostgresStore's `namedStatements`, GANTRY_DATABASE_NAMED_STATEMENTS=on): with
 * only the statements with parameters named, ready → running p99 with 100,000 stages waiting was
 * 75 ms in the one run measured (results file run 12), above issue 32's 50 ms, and no run of main
 * beside it told whether that is this or the hour. Never behind a pooler in transaction mode
 * (PgBouncer before 1.21), where a connection's prepared statements are not its own.
 */
const MAX_NAMED = 2000;

const NAMEABLE = /^\s*(select|insert|update|delete|with)\b/i;

/** Text → name, for the whole process: one text has one name on every connection; null: runs unnamed from now on. */
const names = new Map<string, string | null>();

/** The name `text` runs under, or null where it runs unnamed. */
export function statementName(text: string): string | null {
  const known = names.get(text);
  if (known !== undefined) return known;
  if (names.size >= MAX_NAMED || !NAMEABLE.test(text) || text.includes(';')) return null;
  const name = `gantry_${names.size + 1}`;
  names.set(text, name);
  return name;
}

/**
 * PostgreSQL's feature_not_supported: what a prepared statement answers when a change of its
 * tables altered what it returns ("cached plan must not change result type", a `select *` after
 * another replica's migration added a column). That statement's text then runs unnamed, here and
 * on every connection: the one run fails, the next ones answer as unnamed statements do.
 */
const FEATURE_NOT_SUPPORTED = '0A000';

type Query = (...args: unknown[]) => unknown;

/**
 * Makes `client` send nameable statements named (for a pool's `connect` event) while `enabled()`
 * says so: openPostgresStore turns it on once its migrations ran, so that no statement is
 * prepared against tables a later migration of the same start changes. Only the
 * `query(text, values)` form is changed, the one Kysely's driver uses; every other form goes
 * through as it was.
 */
export function nameStatements(client: pg.ClientBase, enabled: () => boolean = () => true): void {
  const target = client as unknown as { query: Query };
  const query: Query = target.query.bind(client);
  target.query = (text: unknown, values?: unknown, ...rest: unknown[]) => {
    // Only statements with parameters: one without keeps its first plan (see above).
    if (enabled() && typeof text === 'string' && rest.length === 0 && Array.isArray(values) && values.length > 0) {
      const name = statementName(text);
      if (name !== null)
        return (query({ name, text, values }) as Promise<unknown>).catch((err: unknown) => {
          if ((err as { code?: unknown }).code === FEATURE_NOT_SUPPORTED) names.set(text, null);
          throw err;
        });
    }
    return query(text, values, ...rest);
  };
}
