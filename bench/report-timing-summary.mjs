// Reads FILE.server and FILE.agent (GANTRY_REPORT_TIMING) and prints the server's phase split.
import { readFileSync } from 'node:fs';
const f = process.argv[2];
const rd = (s) => readFileSync(`${f}.${s}`, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));
const server = rd('server');
const agent = new Map(rd('agent').map((a) => [a.key, a]));
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : NaN; };
const rows = [];
const split = process.argv[3] ? Number(process.argv[3]) : null;
for (const r of server) {
  const d = r.data;
  if (!d.completed || !d.startedOnPlacement) continue;
  const m = {};
  let tries = 0, firstTry = null;
  for (const [n, t] of r.marks) {
    if (n.startsWith('try')) { tries++; if (firstTry === null) firstTry = t; }
    m[n] = t; // the last of each name: the last try's
  }
  const a = agent.get(d.key);
  const ph = {
    'agent sent → onRequest': a ? m.onRequest - a.sent : undefined,
    'onRequest → handler': m.handler - m.onRequest,
    'handler → tx try': firstTry - m.handler,
    'retries (first try → last)': m.at - firstTry,
    'at → begun (conn + BEGIN)': m.begun - m.at,
    'begun → body (statements)': m.body - m.begun,
    'body → pass': m.pass !== undefined ? m.pass - m.body : 0,
    'pass → flushed': m.flushed - (m.pass ?? m.body),
    'flushed → committed (COMMIT)': m.committed - m.flushed,
    'committed → reported': m.reported - m.committed,
    'reported → assigned (answer reads)': m.assigned - m.reported,
    'assigned → onSend': m.onSend - m.assigned,
    'onSend → responded': m.responded - m.onSend,
    'responded → agent answered': a ? a.answered - m.responded : undefined,
    'at → agent answered (server phase)': a ? a.answered - m.at : undefined,
  };
  d._row = { w: d.completed, ph, tries, busy: m.passBusy !== undefined, at: m.at, completed: d.completed }; rows.push(d._row);
}
const names = Object.keys(rows[0].ph);
function table(rs, title) {
  console.log(`\n${title}: ${rs.length} reports, ${rs.reduce((s, r) => s + r.w, 0)} outcomes (weighted by outcomes)`);
  console.log('| phase | p50 | p90 | p99 | mean |');
  for (const n of names) {
    const xs = rs.flatMap((r) => (r.ph[n] === undefined || !Number.isFinite(r.ph[n]) ? [] : Array(r.w).fill(r.ph[n])));
    console.log(`| ${n} | ${pct(xs, 50).toFixed(1)} | ${pct(xs, 90).toFixed(1)} | ${pct(xs, 99).toFixed(1)} | ${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(1)} |`);
  }
  const cs = rs.flatMap((r) => Array(r.w).fill(r.completed));
  console.log(`outcomes in the report: p50 ${pct(cs, 50)} p90 ${pct(cs, 90)} p99 ${pct(cs, 99)}; reports retried ${rs.filter((r) => r.tries > 1).length}; loop pass busy ${rs.filter((r) => r.busy).length}`);
}
// rounds: split by a gap of more than 3 s between reports
rows.sort((a, b) => a.at - b.at);
const rounds = [[]];
for (let i = 0; i < rows.length; i++) { if (i && rows[i].at - rows[i - 1].at > 3000) rounds.push([]); rounds.at(-1).push(rows[i]); }
rounds.forEach((r, i) => table(r, `round ${i + 1}`));
// The slowest reports: what they were made of
for (const [i, rs] of rounds.entries()) {
  const top = [...rs].sort((a, b) => (b.ph['at → agent answered (server phase)'] ?? 0) - (a.ph['at → agent answered (server phase)'] ?? 0)).slice(0, 8);
  console.log(`\nround ${i + 1}, slowest 8:`);
  for (const r of top) console.log(JSON.stringify({ n: r.completed, tries: r.tries, busy: r.busy, ...Object.fromEntries(Object.entries(r.ph).map(([k, v]) => [k.split(' (')[0], v === undefined ? null : Math.round(v * 10) / 10])) }));
}

// Statements: inside each phase of the last try, how many and how long PostgreSQL took, against the phase.
const spans = [['at', 'begun'], ['begun', 'body'], ['body', 'pass'], ['pass', 'flushed'], ['flushed', 'committed'], ['reported', 'assigned']];
for (const [i, rs] of rounds.entries()) {
  console.log(`\nround ${i + 1}: statements within each phase (per report, weighted by outcomes)`);
  console.log('| phase | statements p50 | p90 | phase ms p50 | db ms p50 | db ms p90 | db ms p99 | node ms (phase − db) p50 | p90 | p99 |');
  const byText = new Map();
  for (const [a, b] of spans) {
    const cnt = [], db = [], node = [], ph = [];
    for (const r0 of rs) {
      const r = server.find((s) => s.data.key === r0.key);
      if (!r) continue;
    }
    for (const r of server) {
      const d = r.data;
      if (!d.completed || !d.startedOnPlacement) continue;
      if (!rs.includes(d._row)) continue;
      const m = {};
      for (const [n, t] of r.marks) m[n] = t;
      const s0 = m[a], s1 = a === 'body' && m.pass === undefined ? m.body : a === 'pass' && m.pass === undefined ? m.body : m[b];
      if (s0 === undefined || s1 === undefined) continue;
      const st = (d.statements ?? []).filter(([, t0]) => t0 >= s0 - 0.05 && t0 < s1);
      const dbt = st.reduce((s, [, t0, t1]) => s + (t1 - t0), 0);
      for (let k = 0; k < d.completed; k++) { cnt.push(st.length); db.push(dbt); node.push(s1 - s0 - dbt); ph.push(s1 - s0); }
      for (const [text, t0, t1] of st) { const key = `${a}→${b}: ${text.slice(0, 70)}`; const e = byText.get(key) ?? { n: 0, ms: [], }; e.n++; e.ms.push(t1 - t0); byText.set(key, e); }
    }
    console.log(`| ${a} → ${b} | ${pct(cnt, 50)} | ${pct(cnt, 90)} | ${pct(ph, 50).toFixed(1)} | ${pct(db, 50).toFixed(1)} | ${pct(db, 90).toFixed(1)} | ${pct(db, 99).toFixed(1)} | ${pct(node, 50).toFixed(1)} | ${pct(node, 90).toFixed(1)} | ${pct(node, 99).toFixed(1)} |`);
  }
  const nrep = rs.length;
  console.log('\nstatements, per report: count, p50, p90, p99 ms');
  for (const [k, e] of [...byText].sort((x, y) => y[1].ms.reduce((a, b) => a + b, 0) - x[1].ms.reduce((a, b) => a + b, 0)).slice(0, 25))
    console.log(`${(e.n / nrep).toFixed(2)}  ${pct(e.ms, 50).toFixed(1)} ${pct(e.ms, 90).toFixed(1)} ${pct(e.ms, 99).toFixed(1)}  ${k}`);
}
