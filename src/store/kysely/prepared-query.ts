import type { Compilable, CompiledQuery, QueryResult, RootOperationNode } from 'kysely';
import type { Db, Trx } from './tx-context.js';

/**
 * A query built by Kysely's builder once, and then run many times with new values.
 *
 * Why: building and compiling a query costs more than SQLite takes to run it (measured: 15 µs to
 * build and compile a ten-column update, 3.5 µs to run it), and the hot path runs the same twenty
 * statements for every stage. The builder still writes the SQL, so each dialect gets its own text
 * (`?` for SQLite, `$1` for PostgreSQL) and the columns stay type-checked: only the values change
 * between runs.
 *
 * How: `build` receives stand-ins for the arguments (strings no real value would be: they start with a private-use character) and uses them
 * wherever a value goes. The compiled query's parameters are then a mix of stand-ins and
 * constants; a run puts each argument where its stand-in was. A stand-in that reached the SQL text
 * itself, or was transformed on the way (stringified into a JSON value, say), would silently bind
 * a wrong value, so either is refused when the query is first compiled. Only queries whose shape
 * does not depend on the values can be prepared: not an `in (…)` list of variable length, not a
 * `set` whose columns vary.
 */
export class PreparedQuery<A extends readonly unknown[], O> {
  /** Compiled once per dialect: a Kysely instance and its transactions share their adapter. */
  private readonly compiled = new WeakMap<object, Template>();

  constructor(private readonly build: (db: Db, args: A) => Compilable<O>) {}

  /** Runs it in `db` (a transaction, or the database), with `args` in the stand-ins' places. */
  run(db: Db | Trx, ...args: A): Promise<QueryResult<O>> {
    const adapter = db.getExecutor().adapter;
    let t = this.compiled.get(adapter);
    if (!t) this.compiled.set(adapter, (t = compileTemplate(this.build(db, standIns() as unknown as A).compile())));
    const parameters = t.constants.slice();
    for (let i = 0; i < t.slots.length; i += 2) parameters[t.slots[i]!] = args[t.slots[i + 1]!];
    return execute(db, { sql: t.sql, parameters, query: t.query, queryId: t.queryId });
  }

  async rows(db: Db | Trx, ...args: A): Promise<O[]> {
    return (await this.run(db, ...args)).rows;
  }

  async first(db: Db | Trx, ...args: A): Promise<O | undefined> {
    return (await this.run(db, ...args)).rows[0];
  }

  /**
   * Its PostgreSQL text with its constants written in, for a query without arguments sent in one
   * round trip with others (pass-reads.ts): PostgreSQL's simple protocol, the one that answers
   * several statements at once, takes no parameters. Only numbers and strings, which the
   * builder's constants are; a query with arguments is refused.
   */
  inlinedText(db: Db | Trx): string {
    const c = this.build(db, standIns() as unknown as A).compile();
    const t = compileTemplate(c);
    if (t.slots.length) throw new Error(`prepared query: ${t.slots.length / 2} arguments, not written into its text: ${t.sql}`);
    return t.sql.replace(/\$(\d+)\b/g, (_, n: string) => sqlLiteral(t.constants[Number(n) - 1]));
  }

  /** Rows an update, insert or delete changed. */
  async affected(db: Db | Trx, ...args: A): Promise<number> {
    return Number((await this.run(db, ...args)).numAffectedRows ?? 0);
  }
}

/**
 * A connection that runs a statement at once, with no executor between: SQLite's, which is the
 * only connection and is held by the open transaction from its begin to its commit. Kysely's way
 * to the connection, per statement, is a fresh executor, a queue on the connection and five
 * promises (measured: a tenth of the server's CPU under load, more than SQLite took to run most
 * of those statements); the transaction already holds the connection, so nothing is queued.
 */
export interface DirectConnection {
  /** The result as Kysely's driver gives it (`numAffectedRows`, `insertId` as bigints). */
  execute(sql: string, parameters: readonly unknown[]): QueryResult<unknown>;
  /** Whether a transaction is open on it: SQLite rolls one back by itself on some errors (disk full, I/O). */
  inTransaction(): boolean;
  /** A count that grows whenever a statement on it may have changed a row (statement-cache.ts): unchanged, no row changed. */
  changes(): number;
}

/** The transactions open on a direct connection (`runDirectlyWithin`), while they are open. */
const openDirect = new WeakMap<object, DirectConnection>();

/**
 * Runs `body` with `trx`'s statements (prepared ones and `execute`'s) going straight to
 * `connection`. Only for the transaction that holds the connection, and only while it is open:
 * after `body`, the transaction's statements go Kysely's way again, which refuses them once it
 * has committed.
 */
export async function runDirectlyWithin<T>(trx: Trx, connection: DirectConnection | null, body: () => Promise<T>): Promise<T> {
  if (!connection) return body();
  openDirect.set(trx, connection);
  try {
    return await body();
  } finally {
    openDirect.delete(trx);
  }
}

/** The change count of `trx`'s direct connection (DirectConnection.changes), or null where `trx` is not open on one. */
export function directChanges(trx: Db | Trx): number | null {
  const direct = openDirect.get(trx);
  return direct ? direct.changes() : null;
}

/**
 * Whether `trx`'s transaction is still open on its direct connection (false: the database rolled
 * it back by itself), or null where `trx` is not open on one and that cannot be told.
 */
export function directTransactionOpen(trx: Db | Trx): boolean | null {
  const direct = openDirect.get(trx);
  return direct ? direct.inTransaction() : null;
}

/** Runs a compiled statement: directly on the connection when `db` is a transaction open on one, else Kysely's way. */
export function execute<O>(db: Db | Trx, q: CompiledQuery<O>): Promise<QueryResult<O>> {
  const direct = openDirect.get(db);
  if (!direct) return db.executeQuery<O>(q);
  try {
    return Promise.resolve(direct.execute(q.sql, q.parameters) as QueryResult<O>);
  } catch (err) {
    return Promise.reject(err);
  }
}

/**
 * One prepared query per size, each built when first asked for: for statements whose shape is a
 * number of items (an `in (…)` list, a multi-row insert). Callers cut their lists to at most `max`
 * items, so at most `max` texts are kept.
 */
export function preparedBySize<Q>(max: number, build: (n: number) => Q): (n: number) => Q {
  const bySize = new Map<number, Q>();
  return (n) => {
    if (!Number.isInteger(n) || n < 1 || n > max) throw new Error(`prepared query: ${n} items, not 1 to ${max}`);
    let q = bySize.get(n);
    if (!q) bySize.set(n, (q = build(n)));
    return q;
  };
}

/**
 * A query over a list of values (an `in (…)` list), prepared per length and run over any number
 * of values, `max` at a time: for the hot reads by ids, which building and compiling anew each
 * time would cost more than running.
 */
export function preparedList<O>(build: (db: Db, values: string[]) => Compilable<O>, max = 64) {
  const bySize = preparedBySize(max, (n) => prepared<string[]>()((db, values) => build(db, values.slice(0, n))));
  return {
    async rows(db: Db | Trx, values: readonly string[]): Promise<O[]> {
      const out: O[] = [];
      for (let i = 0; i < values.length; i += max) {
        const part = values.slice(i, i + max);
        for (const r of await bySize(part.length).rows(db, ...part)) out.push(r);
      }
      return out;
    },
  };
}

/** `prepared<[id: string]>()((db, [id]) => …)`: the arguments' types given, the result's inferred. */
export function prepared<A extends readonly unknown[]>() {
  return <O>(build: (db: Db, args: A) => Compilable<O>) => new PreparedQuery<A, O>(build);
}

/** A constant as PostgreSQL literal text: a finite number as written, a string quoted with its quotes doubled. */
function sqlLiteral(v: unknown): string {
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  if (typeof v === 'string') return `'${v.replaceAll("'", "''")}'`;
  throw new Error(`prepared query: a constant of type ${typeof v} cannot be written into the text`);
}

interface Template {
  sql: string;
  query: RootOperationNode;
  queryId: CompiledQuery['queryId'];
  /** The parameters with every stand-in's place left to fill. */
  constants: unknown[];
  /** Pairs (parameter index, argument index). */
  slots: number[];
}

const MARK = '\uE000gantry-arg:';
const STAND_IN = /^\uE000gantry-arg:(\d+)$/;
const MAX_ARGS = 1024;

/** Made once: every prepared text (a few hundred, counting each list length) is built from the same stand-ins, which builders only read. */
const STAND_INS: readonly string[] = Object.freeze(Array.from({ length: MAX_ARGS }, (_, i) => `${MARK}${i}`));
function standIns(): readonly string[] {
  return STAND_INS;
}

function compileTemplate(c: CompiledQuery): Template {
  if (c.sql.includes(MARK)) throw new Error(`prepared query: an argument was written into the SQL text itself: ${c.sql}`);
  const constants: unknown[] = [];
  const slots: number[] = [];
  c.parameters.forEach((p, i) => {
    const standIn = typeof p === 'string' ? STAND_IN.exec(p) : null;
    if (standIn) {
      slots.push(i, Number(standIn[1]));
      constants.push(undefined);
    } else if (typeof p === 'string' && p.includes(MARK)) {
      throw new Error(`prepared query: an argument was transformed before it was bound (parameter ${i + 1} of ${c.sql})`);
    } else {
      constants.push(p);
    }
  });
  return { sql: c.sql, query: c.query, queryId: c.queryId, constants, slots };
}
