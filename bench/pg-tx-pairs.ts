/**
 * Which transactions the reapers' refused batches met: reads the lines bench/pg-tx-log-preload.ts
 * wrote for both replicas (`DIR/tx-*.jsonl`), names each transaction by what it ran (kind), and for
 * every reaper batch refused, the committed writers that overlapped it in time. SSI refuses one
 * transaction of a chain of read/write dependencies among concurrent ones, so the other is among
 * those; a kind that overlaps the refused batches no more often than the batches that committed is
 * background, one that overlaps the refused ones far more often is a candidate. Also the refusals'
 * reasons as PostgreSQL gave them (pivot, conflict in or out, at commit).
 *
 * Usage: node --import tsx bench/pg-tx-pairs.ts DIR [placing] (`placing`: the scheduler loop's
 * placing transactions in the reapers' stead, branch `placing`).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TxLine } from './pg-tx-log-preload.js';

/** A transaction's kind, from the statements the store's verbs begin with (kysely-store.ts, machine-verbs.ts, report-verbs.ts). */
export function kindOf(t: Pick<TxLine, 'statements'>): string {
  const has = (re: RegExp) => t.statements.some((s) => re.test(s));
  const first = t.statements[0] ?? '';
  if (/from "leader" where "name" = \$1 and "holder"/.test(first)) {
    // A lost machine's batch reads its attempts (machinesReap); a suspect's writes the machine alone.
    if (has(/^update "machines" set "health" = "?v"?\.column4/))
      return has(/^select \* from "attempts" where "machine_id" in/) ? 'reaper: machines lost' : 'reaper: machines suspect';
    if (has(/^update "attempts" set "state" = \$1, "reason" = "?v"?\.column4/)) return 'reaper: overdue attempts';
    return 'leader: pass or other duty';
  }
  if (has(/^with seen\(id, at, period\)/)) return 'liveness flush';
  if (has(/from "leader"/)) return 'leader lease';
  if (/^select "id", "name" from "machines" where "id" = \$/.test(first)) return 'report';
  if (/^select "id", "name", "health", "last_heartbeat_at", "heartbeat_ms"/.test(first)) {
    if (has(/^update "attempts" set "lease_expires_at"/)) return 'heartbeat renewing leases';
    return has(/^(update|insert|with o)/) ? 'heartbeat (other writes)' : 'heartbeat (read only)';
  }
  if (has(/^update "machines" set "last_heartbeat_at"/)) return 'heartbeat renewal (READ COMMITTED)';
  return `other: ${first.slice(0, 50)}`;
}

const writes = (t: TxLine) => t.statements.some((s) => /^(update|insert|delete|with)/i.test(s));
const overlaps = (a: TxLine, b: TxLine) => a.start < b.end && b.start < a.end;

function main(): void {
  const dir = process.argv[2];
  if (!dir) throw new Error("usage: node --import tsx bench/pg-tx-pairs.ts DIR (the preload's GANTRY_BENCH_PG_TXLOG)");
  const all: TxLine[] = [];
  for (const f of readdirSync(dir).filter((n) => /^tx-\d+\.jsonl$/.test(n)))
    for (const l of readFileSync(join(dir, f), 'utf8').split('\n')) if (l) all.push(JSON.parse(l) as TxLine);
  const done = all.filter((t) => t.end > 0);
  const kinds = new Map<TxLine, string>(done.map((t) => [t, kindOf(t)]));
  // The batches that lose attempts (a machine's loss, a lease's): a suspect's batch writes its machine alone.
  // With `placing` after DIR, the scheduler loop's placing transactions instead (a leader's that locks machines).
  const placing = process.argv[3] === 'placing';
  const isReaper = placing
    ? (t: TxLine) => kinds.get(t) === 'leader: pass or other duty' && t.statements.some((x) => x.startsWith('select * from "machines" where "id" in'))
    : (t: TxLine) => kinds.get(t) === 'reaper: machines lost' || kinds.get(t) === 'reaper: overdue attempts';
  const reapers = done.filter(isReaper);
  const refused = reapers.filter((t) => t.outcome === 'refused');
  const committed = reapers.filter((t) => t.outcome === 'commit');
  if (!refused.length) {
    console.log(`${reapers.length} reaper transactions, none refused`);
    return;
  }
  const from = Math.min(...reapers.map((t) => t.start));
  const to = Math.max(...reapers.map((t) => t.end));
  console.log(
    `${done.length} transactions on ${new Set(done.map((t) => t.pid)).size} servers; the reapers' ${reapers.length} (${refused.length} refused) over ${((to - from) / 1000).toFixed(1)} s`,
  );

  // All transactions by kind and outcome, in the reapers' span.
  const inSpan = done.filter((t) => t.end > from && t.start < to);
  const table = new Map<string, { n: number; refused: number }>();
  for (const t of inSpan) {
    const k = kinds.get(t)!;
    const e = table.get(k) ?? { n: 0, refused: 0 };
    e.n++;
    if (t.outcome === 'refused') e.refused++;
    table.set(k, e);
  }
  console.log("\nIn the reapers' span, by kind: transactions / refused");
  for (const [k, e] of [...table].sort((a, b) => b[1].n - a[1].n)) console.log(`  ${k}: ${e.n} / ${e.refused}`);

  const reasons = new Map<string, number>();
  for (const t of inSpan.filter((x) => x.refused)) {
    const key = `${kinds.get(t)} at "${t.refused!.statement.slice(0, 40)}": ${t.refused!.detail.replace(/\s+/g, ' ').slice(0, 110)}`;
    reasons.set(key, (reasons.get(key) ?? 0) + 1);
  }
  console.log('\nRefusals in the span, by kind, statement and reason');
  for (const [k, n] of [...reasons].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`  ${n}  ${k}`);

  // For each reaper batch: the committed writers that overlapped it, by kind; refused against committed batches.
  const writers = inSpan.filter((t) => t.outcome === 'commit' && writes(t));
  const overlapShare = (batches: TxLine[]) => {
    const seen = new Map<string, { batches: number; txs: number }>();
    for (const b of batches) {
      const met = new Map<string, number>();
      for (const w of writers) if (w !== b && overlaps(w, b)) met.set(kinds.get(w)!, (met.get(kinds.get(w)!) ?? 0) + 1);
      for (const [k, n] of met) {
        const e = seen.get(k) ?? { batches: 0, txs: 0 };
        e.batches++;
        e.txs += n;
        seen.set(k, e);
      }
    }
    return seen;
  };
  const r = overlapShare(refused);
  const c = overlapShare(committed);
  const ms = (ts: TxLine[]) => ts.reduce((s, t) => s + t.end - t.start, 0) / Math.max(1, ts.length);
  console.log(
    `\nCommitted writers overlapping a reaper batch: share of batches met, writers met a batch (refused ${refused.length}, ${ms(refused).toFixed(0)} ms each; committed ${committed.length}, ${ms(committed).toFixed(0)} ms each)`,
  );
  for (const k of new Set([...r.keys(), ...c.keys()])) {
    const a = r.get(k) ?? { batches: 0, txs: 0 };
    const b = c.get(k) ?? { batches: 0, txs: 0 };
    console.log(
      `  ${k}: refused ${((100 * a.batches) / refused.length).toFixed(0)} %, ${(a.txs / refused.length).toFixed(1)} a batch; committed ${((100 * b.batches) / Math.max(1, committed.length)).toFixed(0)} %, ${(b.txs / Math.max(1, committed.length)).toFixed(1)} a batch`,
    );
  }
}

main();
