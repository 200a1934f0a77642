import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MergedRuns } from './merged-runs.js';
import { compareQueued } from './plan-placements.js';
import type { QueuedStage } from './snapshot.js';
import { fairOrder, TeamLedger } from './team-ledger.js';

/** Stages with few distinct priorities, times and ids, so that ties at every term of compareQueued are common. */
const stageArb = (time: fc.Arbitrary<number>, priority: fc.Arbitrary<number>) =>
  fc.record({
    priority,
    readySince: time,
    submittedAt: fc.option(time, { nil: undefined }),
    job: fc.integer({ min: 0, max: 2 }),
    stage: fc.integer({ min: 0, max: 4 }),
  });
type StageFields = { priority: number; readySince: number; submittedAt: number | undefined; job: number; stage: number };
const stageOf = (x: StageFields, i: number): QueuedStage => ({
  stageId: `s${x.stage}`,
  jobId: `j${x.job}`,
  stageName: `n${i}`,
  pool: 'cpu',
  priority: x.priority,
  readySince: x.readySince,
  ...(x.submittedAt === undefined ? {} : { submittedAt: x.submittedAt }),
  resources: { cpuMillis: 1000, memoryBytes: 1, gpu: null },
  placement: { region: null, labels: {} },
});
const stages = (time: fc.Arbitrary<number>, priority: fc.Arbitrary<number>) =>
  fc.array(stageArb(time, priority), { maxLength: 60 }).map((xs) => xs.map(stageOf));
const small = () => stageArb(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -2, max: 12 }));
/** Ties of priority and time between most stages: where the order's later terms decide. */
const dense = () => stageArb(fc.integer({ min: 0, max: 1 }), fc.integer({ min: 0, max: 1 }));
/** Values where a difference is not a number: infinities (Infinity - Infinity is NaN, read as a tie). */
const odd = fc.oneof(fc.constantFrom(0.5, -1.25, 2 ** 52, -(2 ** 52), Infinity, -Infinity), fc.integer({ min: -2, max: 2 }));

/** Which stage objects, in which order: identity, not equality (equal-looking stages differ in stageName). */
const names = (xs: readonly (QueuedStage | undefined)[]) => xs.map((s) => s?.stageName);
const sign = (n: number) => (n < 0 ? -1 : n > 0 ? 1 : 0);

function drain<T>(next: () => T | undefined): T[] {
  const out: T[] = [];
  for (let x = next(); x !== undefined; x = next()) out.push(x);
  return out;
}

describe('compareQueued is a total order (docs/scheduling.md, "Order")', () => {
  it('antisymmetric and transitive, and a tie only between stages equal in every term it reads', () => {
    for (const arb of [dense(), small(), stageArb(odd, odd)]) {
      fc.assert(
        fc.property(arb, arb, arb, (x, y, z) => {
          const [a, b, c] = [stageOf(x, 0), stageOf(y, 1), stageOf(z, 2)];
          expect(compareQueued(a, a)).toBe(0);
          expect(sign(compareQueued(a, b)) + sign(compareQueued(b, a))).toBe(0);
          if (compareQueued(a, b) <= 0 && compareQueued(b, c) <= 0) expect(compareQueued(a, c)).toBeLessThanOrEqual(0);
          if (compareQueued(a, b) < 0 && compareQueued(b, c) <= 0) expect(compareQueued(a, c)).toBeLessThan(0);
          if (compareQueued(a, b) === 0) {
            const terms = (s: QueuedStage) => [s.submittedAt !== undefined, s.submittedAt !== undefined ? s.jobId : '', s.readySince, s.stageId];
            expect(terms(a)).toEqual(terms(b));
          }
        }),
        { numRuns: 5000 },
      );
    }
  });

  it('sorts to one order whatever the input order, stages with and without a submission time mixed at one priority and time', () => {
    // The counterexample the planner-equivalence test found to the order before: with s05 before
    // s02 (job ids), s02 before s04 (readiness) and s04 before s05 (stage ids), all of priority 1
    // and time 1, what a sort made of them depended on the comparisons it made.
    const stage = (stageId: string, priority: number, readySince: number, submittedAt: number | undefined, job: number): QueuedStage => ({
      ...stageOf({ priority, readySince, submittedAt, job, stage: 0 }, 0),
      stageId,
      stageName: stageId,
    });
    const xs = [
      stage('s00', 1, 0, undefined, 0),
      stage('s01', 1, 0, undefined, 0),
      stage('s02', 1, 0, 1, 1),
      stage('s03', 0, 0, undefined, 0),
      stage('s04', 1, 1, undefined, 0),
      stage('s05', 1, 1, 1, 0),
    ];
    // At priority 1, time 0: s00, s01 (no submission time: readiness, then id); time 1: s05 and s02
    // (submitted: by job), then s04 (none); then s03 at priority 0.
    const want = ['s00', 's01', 's05', 's02', 's04', 's03'];
    const permutations = (ys: QueuedStage[]): QueuedStage[][] =>
      ys.length <= 1 ? [ys] : ys.flatMap((y, i) => permutations([...ys.slice(0, i), ...ys.slice(i + 1)]).map((rest) => [y, ...rest]));
    for (const p of permutations(xs)) {
      expect(names([...p].sort(compareQueued))).toEqual(want);
      expect(names(drain(fairOrder(p, new TeamLedger(undefined, []), compareQueued)))).toEqual(want);
    }
  });

  it('sorts stages of distinct ids to one order whatever the input order', () => {
    fc.assert(
      fc.property(
        fc.array(dense(), { maxLength: 40 }).chain((fields) => {
          const xs = fields.map((x, i) => ({ ...stageOf(x, i), stageId: `s${i}` }));
          return fc.tuple(fc.constant(xs), fc.shuffledSubarray(xs, { minLength: xs.length, maxLength: xs.length }));
        }),
        ([xs, shuffled]) => {
          expect(names([...shuffled].sort(compareQueued))).toEqual(names([...xs].sort(compareQueued)));
        },
      ),
      { numRuns: 1000 },
    );
  });
});

describe('MergedRuns', () => {
  it('gives what a stable sort gives, ties included, for the input cut into runs in order anywhere', () => {
    fc.assert(
      fc.property(stages(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -2, max: 12 })), fc.array(fc.nat(), { maxLength: 8 }), (xs, cuts) => {
        // Runs: the input cut at the given points, each run sorted; the whole is what their stable merge must give.
        const at = [...new Set(cuts.map((c) => c % (xs.length + 1)))].sort((a, b) => a - b);
        const bounds = [0, ...at, xs.length];
        const input: QueuedStage[] = [];
        for (let k = 0; k + 1 < bounds.length; k++) input.push(...xs.slice(bounds[k], bounds[k + 1]).sort(compareQueued));
        const merged = new MergedRuns(input, compareQueued);
        for (let k = 0; k + 1 < bounds.length; k++) merged.addRun(bounds[k]!, bounds[k + 1]!);
        merged.seal();
        const out: QueuedStage[] = [];
        while (merged.peek() !== undefined) {
          const p = merged.peek();
          expect(input[merged.peekPosition()]).toBe(p);
          expect(merged.take()).toBe(p);
          out.push(p!);
        }
        expect(merged.take()).toBeUndefined();
        expect(merged.peekPosition()).toBe(-1);
        expect(names(out)).toEqual(names([...input].sort(compareQueued)));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('fairOrder over stages in any order', () => {
  it('one team: the stable sort by compareQueued, ties and infinities included', () => {
    for (const [time, priority] of [
      [fc.integer({ min: -3, max: 3 }), fc.integer({ min: -2, max: 12 })],
      [odd, odd],
      [fc.integer({ min: 1_780_000_000_000, max: 1_780_000_000_000 + 86_400_000 }), fc.constantFrom(0, 10)],
    ] as const) {
      fc.assert(
        fc.property(stages(time, priority), (xs) => {
          expect(names(drain(fairOrder(xs, new TeamLedger(undefined, []), compareQueued)))).toEqual(names([...xs].sort(compareQueued)));
        }),
        { numRuns: 1000 },
      );
    }
  });

  it('several teams: each team in compareQueued order, teams interleaved by priority, then share, then compareQueued, as over a sorted queue', () => {
    const teamed = fc
      .array(fc.tuple(small(), fc.constantFrom('a', 'b', 'c')), { maxLength: 60 })
      .map((xs) => xs.map(([x, team], i) => ({ ...stageOf(x, i), team })));
    fc.assert(
      fc.property(teamed, (xs) => {
        // The order over a sorted queue, by its definition: each step, the lanes' heads compared
        // (no placements, so every share is 0; teams listed in the order the sorted queue meets them).
        const sorted = [...xs].sort(compareQueued);
        const lanes = new Map<string, QueuedStage[]>();
        for (const s of sorted) lanes.set(s.team, [...(lanes.get(s.team) ?? []), s]);
        const want: QueuedStage[] = [];
        for (;;) {
          let best: QueuedStage[] | undefined;
          for (const l of lanes.values()) if (l.length > 0 && (best === undefined || compareQueued(l[0]!, best[0]!) < 0)) best = l;
          if (best === undefined) break;
          want.push(best.shift()!);
        }
        expect(names(drain(fairOrder(xs, new TeamLedger(undefined, []), compareQueued)))).toEqual(names(want));
      }),
      { numRuns: 2000 },
    );
  });
});
