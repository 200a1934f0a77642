/**
 * Where a process's CPU went, from a V8 `.cpuprofile` (`node --cpu-prof`; the throughput bench
 * writes its server's and agent's with GANTRY_BENCH_PROF=DIR): self time grouped by what the code
 * belongs to (a package under node_modules, the project's own files by folder, Node's internals,
 * the garbage collector, idle), and the top functions by self time.
 * Usage: node --import tsx bench/cpu-profile-summary.ts FILE.cpuprofile [--top 25]
 */
import { readFileSync } from 'node:fs';
import { usageIfAsked } from './results-header.js';

usageIfAsked(import.meta.url);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file] = process.argv.slice(2);
if (!file) {
  console.error('usage: node --import tsx bench/cpu-profile-summary.ts FILE.cpuprofile [--top 25]');
  process.exit(2);
}
const topIdx = process.argv.indexOf('--top');
const TOP = topIdx > 0 ? Number(process.argv[topIdx + 1]) : 25;
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));

/** What a frame belongs to: a package, a project folder, Node itself, or V8's own pseudo-frames. */
function owner(n: ProfileNode): string {
  const { url, functionName } = n.callFrame;
  if (!url) return `(${functionName || 'native'})`; // (garbage collector), (idle), (program), natives
  if (url.startsWith('node:')) return 'node internals';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  const own = /\/(?:dist|src)\/([^/]+)\//.exec(url);
  if (own) return `gantry ${own[1]}`;
  return url.replace(/^file:\/\//, '');
}

const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const groups = new Map<string, number>();
const fns = new Map<string, number>();
let total = 0;
for (const [id, us] of selfUs) {
  const n = byId.get(id)!;
  total += us;
  const o = owner(n);
  groups.set(o, (groups.get(o) ?? 0) + us);
  const where = n.callFrame.url ? `${n.callFrame.url.replace(/^.*\/(node_modules|dist|src)\//, '$1/')}:${n.callFrame.lineNumber + 1}` : '';
  const key = `${n.callFrame.functionName || '(anonymous)'} ${where}`;
  fns.set(key, (fns.get(key) ?? 0) + us);
}
// V8 names its pseudo-frames in parentheses: (idle), (program), (garbage collector).
const IDLE = '((idle))';
const busy = total - (groups.get(IDLE) ?? 0);
const pct = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)} %`;
console.log(`${file}: ${(total / 1e6).toFixed(2)} s sampled, ${(busy / 1e6).toFixed(2)} s not idle (the percentages are of that)`);
for (const [g, us] of [...groups]
  .filter(([g]) => g !== IDLE)
  .sort((a, b) => b[1] - a[1])
  .slice(0, 30))
  console.log(`  ${pct(us)}  ${g}`);
console.log(`top ${TOP} functions by self time:`);
for (const [f, us] of [...fns]
  .filter(([f]) => !f.startsWith('(idle)'))
  .sort((a, b) => b[1] - a[1])
  .slice(0, TOP))
  console.log(`  ${pct(us)}  ${f}`);
