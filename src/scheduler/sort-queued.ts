import type { QueuedStage } from './snapshot.js';

/** Keys must stay below this to be exact in a float64 (2^53). */
const EXACT = 2 ** 53;

/**
 * `[...stages].sort(compare)`, for `compareQueued` (priority descending, then submission time or
 * readiness ascending, then, on a tie of both, job ids where both stages have a submission time,
 * readiness, stage ids). A pass sorts tens of thousands of heads (docs/throughput.md, "Placement at
 * scale"), and a sort calling `compare` on stage objects a million times was a tenth of it. Here,
 * where priorities and times are integers whose spans fit (the server's: a few priorities,
 * milliseconds over days), each stage's priority, time and position are packed into one number,
 * exact in a float64, sorted natively without a comparison function; then each run of one priority
 * and time is sorted by `compare`. That is the same array wherever `compare` is consistent (a
 * stable sort's output is fixed by its input's order and a consistent order; position breaks the
 * packed numbers' ties as stability does). It is not on a run that mixes stages with and without a
 * submission time (see below): then, and where keys cannot be packed, the sort with `compare` itself.
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
      // compareQueued compares job ids only where both stages have a submission time: in a run
      // that mixes stages with and without one it can be circular (a before b before c before a),
      // and what a sort makes of it depends on the comparisons it makes. Then only the very sort
      // `[...stages].sort(compare)` is that sort.
      const submitted = out[k]!.submittedAt !== undefined;
      for (let j = k + 1; j < end; j++) if ((out[j]!.submittedAt !== undefined) !== submitted) return [...stages].sort(compare);
      const sorted = out.slice(k, end).sort(compare);
      for (let j = k; j < end; j++) out[j] = sorted[j - k]!;
    }
    k = end;
  }
  return out;
}
