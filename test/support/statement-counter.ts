import pg from 'pg';
import { AND_COMMIT } from '../../src/store/kysely/tx-context.js';

/** What one run sent PostgreSQL: statements in all, by first keyword, by text, and the conflicts refused. */
export interface StatementCounts {
  /** Texts sent: each a round trip (a text of several statements, a pass's reads, is one). */
  total: number;
  /** Statements in those texts: a text of several counts each (kysely/pass-reads.ts). */
  statements: number;
  /** Texts of several statements. */
  multi: number;
  /** By first keyword: START (a transaction begins), COMMIT, SELECT, UPDATE, SAVEPOINT, RELEASE… */
  byKind: Map<string, number>;
  byText: Map<string, number>;
  /** Statements answered 40001 (serialization failure) or 40P01 (deadlock): their transaction runs again. */
  conflicts: number;
  /** The statements answered with those conflicts, by text, with the first statement of their transaction (which names the verb). */
  conflictsByText: Map<string, number>;
  /** The same conflicts by statement (70 characters) and PostgreSQL's detail (its reason code: which check refused it). */
  conflictReasons: Map<string, number>;
  /** Commits sent with a transaction's last append (postgres/append-and-commit.ts): no COMMIT text of their own. */
  commitsWithAppend: number;
  /** Milliseconds from sending each statement to its answer, summed (statements in flight at once each count). */
  waitMs: number;
}

/**
 * Counts every statement any `pg` client of this process sends, from now on (a bench's own
 * instrument: it wraps `pg.Client.prototype.query`, which the pool's clients and Kysely's
 * PostgreSQL dialect call for every statement, BEGIN and COMMIT included). Text is keyed with its
 * whitespace folded and cut at 140 characters, enough to tell the store's statements apart.
 */
export function countStatements(): { reset(): void; snapshot(): StatementCounts } {
  let c: StatementCounts = fresh();
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  /** Each connection's open transaction: the first statement after its START. */
  const opening = new WeakMap<object, string>();
  proto.query = function (this: object, ...args: unknown[]) {
    const first = args[0];
    const text = typeof first === 'string' ? first : typeof first === 'object' && first !== null && 'text' in first ? String(first.text) : '';
    const folded = text.replace(/\s+/g, ' ').trim();
    const kind = (folded.split(' ', 1)[0] ?? '').toUpperCase() || '(none)';
    c.total += 1;
    // The store's texts hold no `;` but between the statements of a text of several.
    const n = text.split(/;\s*(?=\S)/).length;
    c.statements += n;
    if (n > 1) c.multi += 1;
    c.byKind.set(kind, (c.byKind.get(kind) ?? 0) + 1);
    if (typeof first === 'object' && first !== null && 'submit' in first && text.endsWith(AND_COMMIT)) c.commitsWithAppend += 1;
    const key = folded.slice(0, 140);
    c.byText.set(key, (c.byText.get(key) ?? 0) + 1);
    if (kind === 'START' || kind === 'BEGIN') opening.set(this, '');
    else if (opening.get(this) === '') opening.set(this, folded.slice(0, 90));
    const tx = opening.get(this) ?? '(no transaction)';
    const run = c;
    const sent = performance.now();
    const answered = () => void (run.waitMs += performance.now() - sent);
    const refused = (err: unknown) => {
      run.waitMs += performance.now() - sent;
      const code = (err as { code?: unknown }).code;
      if (code === '40001' || code === '40P01') {
        run.conflicts += 1;
        const why = String((err as { message?: unknown }).message).slice(0, 70);
        const where = `${key.slice(0, 70)}  ← (${why}) in a transaction that began: ${tx}`;
        run.conflictsByText.set(where, (run.conflictsByText.get(where) ?? 0) + 1);
        const detail = (err as { detail?: unknown }).detail;
        const reason = `${key.slice(0, 70)}  ← ${typeof detail === 'string' ? detail : ''}`;
        run.conflictReasons.set(reason, (run.conflictReasons.get(reason) ?? 0) + 1);
      }
    };
    // A Submittable (an append sent with its commit, postgres/append-and-commit.ts): answered
    // through its handlers, not a promise; its commit's refusal is counted as a COMMIT's was.
    const submittable =
      typeof first === 'object' && first !== null && 'submit' in first
        ? (first as unknown as { handleError(e: unknown): void; handleReadyForQuery(): void })
        : null;
    if (submittable) {
      const handleError = submittable.handleError.bind(submittable);
      const handleReadyForQuery = submittable.handleReadyForQuery.bind(submittable);
      submittable.handleError = (err: unknown) => (refused(err), handleError(err));
      submittable.handleReadyForQuery = () => (answered(), handleReadyForQuery());
    }
    const out = original.apply(this, args);
    if (out instanceof Promise) out.then(answered, refused);
    return out;
  };
  return {
    reset: () => void (c = fresh()),
    snapshot: () => c,
  };
}

function fresh(): StatementCounts {
  return {
    total: 0,
    statements: 0,
    multi: 0,
    byKind: new Map(),
    byText: new Map(),
    conflicts: 0,
    conflictsByText: new Map(),
    conflictReasons: new Map(),
    commitsWithAppend: 0,
    waitMs: 0,
  };
}
