/**
 * What held a server's event loop, read from a `--cpu-prof` profile (GANTRY_BENCH_PROF): the
 * stretches of consecutive samples that were not idle, in a window of the profile's clock, and
 * what each long stretch was made of. A sample counts wall time (a thread waiting for a core, or in
 * an fsync under a synchronous SQLite call, is "busy"), so a stretch is the loop's latency, what a
 * held heartbeat's answer waits on, not its CPU.
 *
 * Usage: node --import tsx bench/loop-stretches.ts PROFILE.cpuprofile [--windows DIR/windows.json]
 *   [--over 100] [--top 8]
 * `--windows`: the file bench/fleet.ts writes beside the profiles (its idle and load windows, on
 * the monotonic clock the profile uses); without it, the whole profile is one window.
 */
import { readFileSync } from 'node:fs';
import { arg, num, usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const file = process.argv[2];
if (!file || file.startsWith('--')) throw new Error('usage: loop-stretches.ts PROFILE.cpuprofile [--windows FILE] [--over MS] [--top N]');
const OVER_MS = num('over', 100);
const TOP = num('top', 8);
const windowsFile = arg('windows', '');
const prof = JSON.parse(readFileSync(file, 'utf8')) as Profile;

const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

/** The sample's stack, leaf first. */
function stack(id: number): ProfileNode[] {
  const out: ProfileNode[] = [];
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) out.push(byId.get(at)!);
  return out;
}

const short = (f: CallFrame) =>
  `${f.functionName || '(anon)'} ${f.url.replace(/^.*\/(dist|node_modules)\//, '$1/').replace(/^node:/, 'node:')}:${f.lineNumber + 1}`;
const ours = (f: CallFrame) => /\/dist\//.test(f.url) && !/node_modules/.test(f.url);

/**
 * A sample's kind, by the first frame that names one, leaf first: what the stretch tables sum.
 * The order matters: a SQLite statement under the liveness flush is the flush's.
 */
function kind(s: ProfileNode[]): string {
  const leaf = s[0]!.callFrame.functionName;
  if (leaf === '(garbage collector)') return 'gc';
  if (leaf === '(program)') return 'program';
  for (const n of s) {
    const { functionName: fn, url } = n.callFrame;
    if (/heartbeat-liveness|machines-seen/.test(url)) return 'liveness flush';
    if (/scheduler-pass|plan-placements|\/scheduler\//.test(url)) return `scheduler: ${fn || '(anon)'}`;
    if (/outbox-relay|\/bus\//.test(url)) return 'outbox/bus';
  }
  for (const n of s) {
    const { functionName: fn, url } = n.callFrame;
    if (/better-sqlite3/.test(url) || fn === 'commit' || fn === 'run' || fn === 'all' || fn === 'get') {
      if (/better-sqlite3|sqlite/.test(url)) return 'sqlite';
    }
    if (fn === 'writev' || fn === 'writeGeneric' || fn === 'writevGeneric') return 'socket writes';
    if (/node_modules\/(fastify|find-my-way|avvio|light-my-request|@fastify)/.test(url)) return 'fastify';
    if (/node_modules\/pino/.test(url)) return 'pino';
    if (/node_modules\/kysely/.test(url)) return 'kysely';
  }
  const o = s.find((n) => ours(n.callFrame));
  return o ? `ours: ${o.callFrame.url.replace(/^.*\/dist\//, '')}` : `node: ${s[0]!.callFrame.functionName || s[0]!.callFrame.url}`;
}

interface Stretch {
  start: number;
  ms: number;
  ids: number[];
  dts: number[];
}

// Consecutive non-idle samples; a sample's time is its delta to the next one.
const stretches: Stretch[] = [];
let t = prof.startTime;
let cur: Stretch | null = null;
for (let i = 0; i < prof.samples.length; i++) {
  t += prof.timeDeltas[i]!;
  const id = prof.samples[i]!;
  const dt = (prof.timeDeltas[i + 1] ?? 0) / 1000;
  const idle = byId.get(id)!.callFrame.functionName === '(idle)';
  if (idle) {
    if (cur) stretches.push(cur);
    cur = null;
    continue;
  }
  cur ??= { start: t, ms: 0, ids: [], dts: [] };
  cur.ms += dt;
  cur.ids.push(id);
  cur.dts.push(dt);
}
if (cur) stretches.push(cur);

const windows: { name: string; from: number; to: number }[] = windowsFile
  ? (JSON.parse(readFileSync(windowsFile, 'utf8')) as { name: string; from: number; to: number }[])
  : [{ name: 'whole', from: prof.startTime, to: prof.endTime }];

const sumBy = (ss: Stretch[], key: (s: ProfileNode[]) => string) => {
  const m = new Map<string, number>();
  for (const st of ss) st.ids.forEach((id, i) => m.set(key(stack(id)), (m.get(key(stack(id))) ?? 0) + st.dts[i]!));
  return [...m].sort((a, b) => b[1] - a[1]);
};

for (const w of windows) {
  const ins = stretches.filter((s) => s.start >= w.from && s.start < w.to);
  const secs = (w.to - w.from) / 1e6;
  const busy = ins.reduce((a, s) => a + s.ms, 0);
  const over = (ms: number) => ins.filter((s) => s.ms > ms).length;
  const sorted = [...ins].sort((a, b) => b.ms - a.ms);
  console.log(
    `\n## ${w.name}: ${secs.toFixed(1)} s, loop busy ${(busy / 1000).toFixed(1)} s; stretches over 20 / 50 / 100 ms: ${over(20)} / ${over(50)} / ${over(100)}; longest ${sorted
      .slice(0, 5)
      .map((s) => s.ms.toFixed(0))
      .join(', ')} ms`,
  );
  const long = ins.filter((s) => s.ms > 20);
  const total = long.reduce((a, s) => a + s.ms, 0);
  console.log(`what the stretches over 20 ms were (${(total / 1000).toFixed(2)} s):`);
  for (const [k, ms] of sumBy(long, kind).slice(0, 14))
    console.log(`  ${((100 * ms) / total).toFixed(1).padStart(5)} %  ${ms.toFixed(0).padStart(6)} ms  ${k}`);
  for (const s of sorted.filter((x) => x.ms > OVER_MS)) {
    console.log(`\n### stretch of ${s.ms.toFixed(0)} ms at +${((s.start - w.from) / 1e6).toFixed(2)} s (${s.ids.length} samples)`);
    for (const [k, ms] of sumBy([s], kind).slice(0, TOP)) console.log(`  ${ms.toFixed(1).padStart(6)} ms  ${k}`);
    // Our outermost frames below the event loop's callback: which of our calls the stretch ran in.
    console.log('  outermost of ours:');
    for (const [k, ms] of sumBy([s], (st) => {
      const o = [...st].reverse().find((n) => ours(n.callFrame));
      return o ? short(o.callFrame) : '(none of ours)';
    }).slice(0, TOP))
      console.log(`  ${ms.toFixed(1).padStart(6)} ms  ${k}`);
    console.log('  innermost of ours:');
    for (const [k, ms] of sumBy([s], (st) => {
      const o = st.find((n) => ours(n.callFrame));
      return o ? short(o.callFrame) : '(none of ours)';
    }).slice(0, TOP))
      console.log(`  ${ms.toFixed(1).padStart(6)} ms  ${k}`);
  }
}
