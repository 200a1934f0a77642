/**
 * The report transactions' refusals in a fleet run's transaction log (bench/pg-tx-log-preload.ts,
 * `GANTRY_BENCH_PG_TXLOG=DIR`): all transactions and the refused ones by kind (pg-tx-pairs.ts's
 * `kindOf`), the reports' refusals by PostgreSQL's reason and by the statement refused, and the
 * reports apart by whether they ran a pass before their commit (its reads: pass-reads.ts, whose
 * first statement is the ready shapes' walk) and whether it wrote (a plan applied). Branch
 * `refusals` (docs/throughput.md, "Reports refused at their append").
 *
 * Usage: node --import tsx bench/pg-report-refusals.ts DIR
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TxLine } from './pg-tx-log-preload.js';
import { kindOf } from './pg-tx-pairs.js';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node --import tsx bench/pg-report-refusals.ts DIR (the preload GANTRY_BENCH_PG_TXLOG)');
const all: TxLine[] = [];
for (const f of readdirSync(dir).filter((n) => /^tx-\d+\.jsonl$/.test(n)))
  for (const l of readFileSync(join(dir, f), 'utf8').split('\n')) if (l) all.push(JSON.parse(l) as TxLine);
const done = all.filter((t) => t.end > 0);
const pct = (a: number, b: number) => (b ? `${((100 * a) / b).toFixed(1)} %` : '–');
const refused = (t: TxLine) => t.outcome === 'refused';

const byKind = new Map<string, { n: number; refused: number }>();
for (const t of done) {
  const k = kindOf(t).startsWith('other:') ? 'other' : kindOf(t);
  const e = byKind.get(k) ?? { n: 0, refused: 0 };
  e.n++;
  if (refused(t)) e.refused++;
  byKind.set(k, e);
}
const totalRefused = done.filter(refused).length;
console.log(`${done.length} transactions, ${totalRefused} refused (${pct(totalRefused, done.length)})`);
console.log('| kind | transactions | refused | share of its kind | share of all transactions |');
console.log('| --- | ---: | ---: | ---: | ---: |');
for (const [k, e] of [...byKind].sort((a, b) => b[1].refused - a[1].refused))
  console.log(`| ${k} | ${e.n} | ${e.refused} | ${pct(e.refused, e.n)} | ${pct(e.refused, done.length)} |`);

const reports = done.filter((t) => kindOf(t) === 'report');
const reason = (t: TxLine) => (t.refused?.detail ?? '').replace(/^Reason code: /, '').replace(/ \d+\.$/, ' N.') || t.refused?.code || '?';
const where = (t: TxLine) => {
  const s = t.refused?.statement ?? '';
  if (/^with o as \(insert into "outbox"|^insert into "events"|^with a as \(insert into "audit"|^insert into "audit"/.test(s))
    return 'the append (outbox, audit, events)';
  if (s === 'COMMIT' || /^commit/i.test(s)) return 'commit';
  return s.slice(0, 45);
};
const count = (xs: TxLine[], f: (t: TxLine) => string) => {
  const m = new Map<string, number>();
  for (const t of xs) m.set(f(t), (m.get(f(t)) ?? 0) + 1);
  return [...m].sort((a, b) => b[1] - a[1]);
};
const rr = reports.filter(refused);
console.log(`\nreports: ${reports.length}, refused ${rr.length} (${pct(rr.length, reports.length)})`);
console.log('refused, by reason and statement:');
for (const [k, n] of count(rr, (t) => `${reason(t)} | ${where(t)}`)) console.log(`  ${n}  ${k}`);

// A pass before the commit: its reads (the ready shapes' walk first); a plan applied: attempts inserted.
const passed = (t: TxLine) => t.statements.some((s) => s.startsWith('with recursive s(shape)'));
const placed = (t: TxLine) => t.statements.some((s) => /^insert into "attempts"/.test(s));
for (const [name, f] of [
  ['with a pass before the commit', (t: TxLine) => passed(t)],
  ['  of which placed (attempts inserted)', (t: TxLine) => passed(t) && placed(t)],
  ['without one', (t: TxLine) => !passed(t)],
] as const) {
  const xs = reports.filter(f);
  console.log(`reports ${name}: ${xs.length}, refused ${xs.filter(refused).length} (${pct(xs.filter(refused).length, xs.length)})`);
}
