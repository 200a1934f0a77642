/**
 * Preloaded into the fleet bench's servers (`GANTRY_BENCH_PG_TXLOG=DIR`, PostgreSQL only, through
 * GANTRY_BENCH_SERVER_FLAGS="--import tsx --import ./bench/pg-tx-log-preload.ts"): every
 * transaction any `pg` client of the server runs, one JSON line each in `DIR/tx-<pid>.jsonl` when
 * the process exits: when it began and ended (milliseconds on the host's clock, so the two
 * replicas' lines compare), the statements it ran (each text's start, once), and how it ended
 * (committed, refused with PostgreSQL's code and reason, or rolled back). bench/pg-tx-pairs.ts
 * matches the refused ones against those that overlapped them and committed.
 *
 * pg-count-preload.ts counts refusals by the transaction refused; SSI refuses one transaction of a
 * pair (or of a chain) of read/write dependencies and names neither the other nor the rows, so the
 * pairs can only be found from the times (docs/failure-detection.md, "Which writers the reapers meet").
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';

/** One transaction, as a line of the log. */
export interface TxLine {
  pid: number;
  conn: number;
  start: number;
  end: number;
  outcome: 'commit' | 'refused' | 'rollback' | 'error';
  /** The statements' texts, whitespace folded, cut at 70 characters, each once, in order. */
  statements: string[];
  /** For a refusal: the statement refused, PostgreSQL's code and its detail (the reason code: pivot, conflict in or out, on commit). */
  refused?: { statement: string; code: string; detail: string };
}

const dir = process.env.GANTRY_BENCH_PG_TXLOG;
if (dir) {
  const lines: TxLine[] = [];
  const open = new WeakMap<object, TxLine>();
  const ids = new WeakMap<object, number>();
  let nextConn = 0;
  const at = () => performance.timeOrigin + performance.now();
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function (this: object, ...args: unknown[]) {
    const first = args[0];
    const text = typeof first === 'string' ? first : typeof first === 'object' && first !== null && 'text' in first ? String(first.text) : '';
    const folded = text.replace(/\s+/g, ' ').trim();
    const kind = (folded.split(' ', 1)[0] ?? '').toUpperCase();
    if (!ids.has(this)) ids.set(this, nextConn++);
    if (kind === 'START' || kind === 'BEGIN') {
      const tx: TxLine = { pid: process.pid, conn: ids.get(this)!, start: at(), end: 0, outcome: 'error', statements: [] };
      open.set(this, tx);
      lines.push(tx);
    }
    const tx = open.get(this);
    const short = folded.slice(0, 70);
    if (tx && kind !== 'START' && kind !== 'BEGIN' && !tx.statements.includes(short) && tx.statements.length < 24) tx.statements.push(short);
    const out = original.apply(this, args);
    if (tx && out instanceof Promise) {
      const close = (outcome: TxLine['outcome']) => {
        if (open.get(this) !== tx) return;
        tx.end = at();
        tx.outcome = outcome;
        open.delete(this);
      };
      out.then(
        () => {
          if (kind === 'COMMIT') close('commit');
          else if (kind === 'ROLLBACK') close(tx.refused ? 'refused' : 'rollback');
        },
        (err: unknown) => {
          const e = err as { code?: unknown; detail?: unknown };
          const code = typeof e.code === 'string' ? e.code : '';
          if (code === '40001' || code === '40P01') {
            tx.refused = { statement: short, code, detail: typeof e.detail === 'string' ? e.detail : '' };
            close('refused');
          } else if (kind === 'COMMIT') close('error');
        },
      );
    }
    return out;
  };
  process.on('exit', () => {
    writeFileSync(join(dir, `tx-${process.pid}.jsonl`), lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
  });
}
