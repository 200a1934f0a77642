import type { Database, Statement } from 'better-sqlite3';

/**
 * better-sqlite3 as Kysely's SqliteDialect sees it, with prepared statements kept by their SQL
 * text. Kysely prepares every query it runs; preparing costs more than running a small indexed
 * statement, and the same few hundred statements run over and over, so they are kept (the least
 * recently used one goes past `max`: a query built with a variable number of parameters, an
 * `in (…)` list, has one text per length).
 */
export function cachingDatabase(db: Database, max = 500): { close(): void; prepare(sql: string): Statement } {
  const cache = new Map<string, Statement>();
  return {
    close: () => {
      cache.clear();
      db.close();
    },
    prepare(sql: string): Statement {
      let st = cache.get(sql);
      if (st) {
        // Most recently used last: Map keeps insertion order.
        cache.delete(sql);
        cache.set(sql, st);
        return st;
      }
      st = db.prepare(sql);
      cache.set(sql, st);
      if (cache.size > max) cache.delete(cache.keys().next().value!);
      return st;
    },
  };
}
