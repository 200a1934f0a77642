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
export interface CachingDatabase {
  close(): void;
  prepare(sql: string): CountingStatement;
  readonly inTransaction: boolean;
  /**
   * A count that grows whenever a statement run through this cache may have changed a row: by the
   * rows a `run` changed, and by one for every `all` or `iterate` of a statement that is not
   * read-only (an `insert … returning`). Equal before and after a piece of work: it changed no
   * row. What an optimistic savepoint asks (tx-context.ts), answered without a statement: reading
   * SQLite's `total_changes()` twice for every item of a report was two statements in twelve.
   */
  readonly changes: number;
}

/** A prepared statement as Kysely's SQLite driver uses it, counting what it may have changed. */
export interface CountingStatement {
  readonly reader: boolean;
  all(parameters: readonly unknown[]): unknown[];
  run(parameters: readonly unknown[]): { changes: number; lastInsertRowid: number | bigint };
  iterate(parameters: readonly unknown[]): IterableIterator<unknown>;
}

export function cachingDatabase(db: Database, max = 500): CachingDatabase {
  let young = new Map<string, CountingStatement>();
  let old = new Map<string, CountingStatement>();
  let changes = 0;
  const counting = (st: Statement): CountingStatement => {
    const writes = !st.readonly;
    return {
      reader: st.reader,
      all(parameters) {
        const rows = st.all(parameters);
        if (writes) changes++;
        return rows;
      },
      run(parameters) {
        const r = st.run(parameters);
        changes += r.changes;
        return r;
      },
      iterate(parameters) {
        if (writes) changes++;
        return st.iterate(parameters);
      },
    };
  };
  return {
    get changes() {
      return changes;
    },
    get inTransaction() {
      return db.inTransaction;
    },
    close: () => {
      young.clear();
      old.clear();
      db.close();
    },
    prepare(sql: string): CountingStatement {
      let st = young.get(sql);
      if (st) return st;
      st = old.get(sql) ?? counting(db.prepare(sql));
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
export function directConnection(db: CachingDatabase): DirectConnection {
  return {
    inTransaction: () => db.inTransaction,
    changes: () => db.changes,
    execute(sql, parameters) {
      const st = db.prepare(sql);
      if (st.reader) return { rows: st.all(parameters) };
      const r = st.run(parameters);
      return { numAffectedRows: BigInt(r.changes), insertId: BigInt(r.lastInsertRowid), rows: [] };
    },
  };
}
