import type { QueuedStage } from './snapshot.js';

/** Keys must stay below this to be exact in a float64 (2^53). */
const EXACT = 2 ** 53;

/**
 * The stages sorted by `compare` (a copy; stable, as `Array.prototype.sort`), where `compare`
 * orders first by priority, descending, then by submission time (or readiness) ascending, as
 * `compareQueued` does, and decides ties of both by what follows. A pass sorts tens of thousands of
 * heads (docs/throughput.md, "Placement at scale"), and a sort that calls a comparison of two
 * stage objects a million times was a tenth of it. Here, where priorities and times are integers
 * whose spans fit (the server's: a few priorities, times in milliseconds over days), each stage's
 * priority, time and position are packed into one number, exact in a float64, and the numbers are
 * sorted natively, with no comparison function; runs of one priority and time, then, are sorted by
 * `compare` (their first two terms are 0 there). Otherwise, a sort with `compare`. Either way the
 * array `[...stages].sort(compare)` returns: a stable sort's output is fixed by its input's order
 * and the order `compare` gives, and position breaks the packed numbers' ties as stability does.
 */
export function sortQueued(stages: readonly QueuedStage[], compare: (a: QueuedStage, b: QueuedStage) => number): QueuedStage[] {
  const n = stages.length;
  const time = new Float64Array(n);
  let pMin = Infinity;
  let pMax = -Infinity;
  let tMin = Infinity;
  let tMax = -Infinity;
  let integers = true;
  for (let i = 0; i < n; i++) {
    const s = stages[i]!;
    const p = s.priority;
    const t = s.submittedAt ?? s.readySince;
    time[i] = t;
    if (!Number.isSafeInteger(p) || !Number.isSafeInteger(t)) {
      integers = false;
      break;
    }
    if (p < pMin) pMin = p;
    if (p > pMax) pMax = p;
    if (t < tMin) tMin = t;
    if (t > tMax) tMax = t;
  }
  const spanP = pMax - pMin + 1;
  const spanT = tMax - tMin + 1;
  // Powers of two: positions are then read back from a key exactly.
  const positions = 2 ** Math.ceil(Math.log2(Math.max(2, n)));
  if (n < 2 || !integers || spanP * spanT * positions >= EXACT) return [...stages].sort(compare);

  const keys = new Float64Array(n);
  for (let i = 0; i < n; i++) keys[i] = ((pMax - stages[i]!.priority) * spanT + (time[i]! - tMin)) * positions + i;
  keys.sort();
  const out: QueuedStage[] = [];
  for (let k = 0; k < n; k++) out.push(stages[keys[k]! % positions]!);
  // Runs of equal priority and time (a batch submitted in one millisecond), in input order: by `compare`.
  for (let k = 0; k < n - 1;) {
    const run = Math.floor(keys[k]! / positions);
    let end = k + 1;
    while (end < n && Math.floor(keys[end]! / positions) === run) end++;
    if (end - k > 1) {
      const sorted = out.slice(k, end).sort(compare);
      for (let j = k; j < end; j++) out[j] = sorted[j - k]!;
    }
    k = end;
  }
  return out;
}
