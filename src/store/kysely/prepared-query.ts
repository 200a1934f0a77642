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
    if (!t) this.compiled.set(adapter, (t = compileTemplate(this.build(db as Db, standIns() as unknown as A).compile())));
    const parameters = t.constants.slice();
    for (let i = 0; i < t.slots.length; i += 2) parameters[t.slots[i]!] = args[t.slots[i + 1]!];
    return db.executeQuery<O>({ sql: t.sql, parameters, query: t.query, queryId: t.queryId } as CompiledQuery<O>);
  }

  async rows(db: Db | Trx, ...args: A): Promise<O[]> {
    return (await this.run(db, ...args)).rows;
  }

  async first(db: Db | Trx, ...args: A): Promise<O | undefined> {
    return (await this.run(db, ...args)).rows[0];
  }

  /** Rows an update, insert or delete changed. */
  async affected(db: Db | Trx, ...args: A): Promise<number> {
    return Number((await this.run(db, ...args)).numAffectedRows ?? 0);
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

/** `prepared<[id: string]>()((db, [id]) => …)`: the arguments' types given, the result's inferred. */
export function prepared<A extends readonly unknown[]>() {
  return <O>(build: (db: Db, args: A) => Compilable<O>) => new PreparedQuery<A, O>(build);
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

function standIns(): string[] {
  return Array.from({ length: MAX_ARGS }, (_, i) => `${MARK}${i}`);
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
