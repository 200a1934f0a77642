/**
 * Samples the append lock (docs/store-contract.md, "Sequences in commit order") while a bench runs
 * beside it: every `--interval-ms` (200), how many backends wait for it, and what its holder is
 * doing (running a statement, or `idle in transaction`: waiting for its Node process to send the
 * next message). Runs until SIGTERM or SIGINT, then prints a summary (JSON) and writes it to
 * `--out` if given. The lock's key is one for the whole database: any process of any schema that
 * appends is counted.
 *
 * Usage: node --import tsx bench/append-lock-waits.ts [--interval-ms 200] [--out FILE] &
 */
import { writeFileSync } from 'node:fs';
import pg from 'pg';
import { POSTGRES_URL } from '../test/support/services.js';
import { arg, num, usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);
const INTERVAL_MS = num('interval-ms', 200);
const OUT = arg('out', '');
/** tx-context.ts APPEND_LOCK_KEY, 7355608001, as pg_locks shows a bigint key: its high and low 32 bits. */
const CLASSID = Math.floor(7355608001 / 2 ** 32);
const OBJID = 7355608001 % 2 ** 32;

const client = new pg.Client({ connectionString: POSTGRES_URL });
await client.connect();
const waiting: number[] = [];
const holder: Record<string, number> = {};
let stop = false;
process.on('SIGTERM', () => (stop = true));
process.on('SIGINT', () => (stop = true));
const started = Date.now();
while (!stop) {
  const next = Date.now() + INTERVAL_MS;
  const { rows } = await client.query<{ granted: boolean; state: string | null }>(
    `select l.granted, a.state from pg_locks l left join pg_stat_activity a on a.pid = l.pid
     where l.locktype = 'advisory' and l.classid = $1 and l.objid = $2 and l.objsubid = 1`,
    [CLASSID, OBJID],
  );
  waiting.push(rows.filter((r) => !r.granted).length);
  const held = rows.find((r) => r.granted);
  const state = held ? (held.state ?? 'unknown') : 'none';
  holder[state] = (holder[state] ?? 0) + 1;
  await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
}
await client.end();
const sorted = [...waiting].sort((a, b) => a - b);
const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
const summary = {
  seconds: Math.round((Date.now() - started) / 1000),
  samples: waiting.length,
  withWaiters: waiting.filter((n) => n > 0).length,
  meanWaiters: waiting.reduce((a, b) => a + b, 0) / Math.max(1, waiting.length),
  p50: at(0.5),
  p90: at(0.9),
  p99: at(0.99),
  max: sorted.at(-1) ?? 0,
  /** Samples by the holder's state: none held, `active` (PostgreSQL working), `idle in transaction` (waiting for its Node process). */
  holder,
};
const text = JSON.stringify(summary);
console.log(text);
if (OUT) writeFileSync(OUT, text + '\n');
