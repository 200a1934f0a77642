/**
 * The statements a PostgreSQL cluster spent its time on, from pg_stat_statements, for the
 * throughput bench (GANTRY_BENCH_PG_STATEMENTS=1; bench/pg-private.sh makes a cluster that has
 * it). The view is the whole cluster's: reset before a system's run, read after it, on a cluster
 * nothing else uses. Executor time is wall time in the backend, a COMMIT's includes its WAL flush.
 */
import pg from 'pg';

export interface TopStatements {
  /** Every statement's calls and executor time in the window. */
  calls: number;
  totalMs: number;
  rows: { query: string; calls: number; totalMs: number; meanMs: number; rows: number }[];
}

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Empties the view (the extension must be loaded and created: bench/pg-private.sh). */
export function resetStatements(url: string): Promise<void> {
  return withClient(url, async (c) => void (await c.query('select pg_stat_statements_reset()')));
}

/** The `limit` statements with the most executor time since the last reset. */
export function topStatements(url: string, limit = 15): Promise<TopStatements> {
  return withClient(url, async (c) => {
    const all = (
      await c.query<{ calls: string; ms: number }>(
        `select sum(calls) as calls, sum(total_exec_time) as ms from pg_stat_statements where query not like '%pg_stat_statements%'`,
      )
    ).rows[0]!;
    const top = await c.query<{ query: string; calls: string; total: number; mean: number; rows: string }>(
      `select regexp_replace(query, '\\s+', ' ', 'g') as query, calls, total_exec_time as total, mean_exec_time as mean, rows
       from pg_stat_statements where query not like '%pg_stat_statements%' order by total_exec_time desc limit $1`,
      [limit],
    );
    return {
      calls: Number(all.calls ?? 0),
      totalMs: Number(all.ms ?? 0),
      rows: top.rows.map((r) => ({ query: r.query, calls: Number(r.calls), totalMs: Number(r.total), meanMs: Number(r.mean), rows: Number(r.rows) })),
    };
  });
}

/** Prints `top` per stage to stderr: calls a stage, mean and total ms, rows a call, the statement's start. */
export function printTopStatements(who: string, top: TopStatements, stages: number): void {
  const per = (x: number) => (x / stages).toFixed(2);
  console.error(`${who}: PostgreSQL executed ${per(top.calls)} statements a stage, ${per(top.totalMs)} ms of executor time a stage; the most time:`);
  console.error('  calls/stage   mean ms   ms/stage   rows/call  statement');
  for (const r of top.rows)
    console.error(
      `  ${per(r.calls).padStart(11)} ${r.meanMs.toFixed(3).padStart(9)} ${per(r.totalMs).padStart(10)} ${(r.rows / Math.max(1, r.calls)).toFixed(1).padStart(11)}  ${r.query.slice(0, 160)}`,
    );
}
