import type { Database, Statement } from 'better-sqlite3';
import type { DirectConnection } from '../kysely/prepared-query.js';

/**
 * better-sqlite3 as Kysely's SqliteDialect sees it, with prepared statements kept by their SQL
 * text. Kysely prepares every query it runs; preparing costs more than running a small indexed
 * statement, and the same few hundred statements run over and over, so they are kept.
 *
 * Kept in two generations rather than in strict least-recently-used order: a hit in the young
 * generation is one Map lookup (reordering a Map on every hit cost 2 % of the server under load,
 * measured); a hit in the old one moves the statement to the young; when the young one fills
 * (`max / 2`), it becomes the old and the old is dropped. A statement in use keeps being found;
 * one not used for a generation goes (a query built with a variable number of parameters, an
 * `in (…)` list, has one text per length, and most lengths are rare).
 */
export function cachingDatabase(db: Database, max = 500): { close(): void; prepare(sql: string): Statement; readonly inTransaction: boolean } {
  let young = new Map<string, Statement>();
  let old = new Map<string, Statement>();
  return {
    get inTransaction() {
      return db.inTransaction;
    },
    close: () => {
      young.clear();
      old.clear();
      db.close();
    },
    prepare(sql: string): Statement {
      let st = young.get(sql);
      if (st) return st;
      st = old.get(sql) ?? db.prepare(sql);
      if (young.size >= max / 2) {
        old = young;
        young = new Map();
      }
      young.set(sql, st);
      return st;
    },
  };
}

/** The connection run directly (prepared-query.ts), through the same cache, with the results Kysely's SQLite driver gives. */
export function directConnection(db: { prepare(sql: string): Statement; readonly inTransaction: boolean }): DirectConnection {
  return {
    inTransaction: () => db.inTransaction,
    execute(sql, parameters) {
      const st = db.prepare(sql);
      if (st.reader) return { rows: st.all(parameters) };
      const r = st.run(parameters);
      return { numAffectedRows: BigInt(r.changes), insertId: BigInt(r.lastInsertRowid), rows: [] };
    },
  };
}
