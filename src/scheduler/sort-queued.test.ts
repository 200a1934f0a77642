import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareQueued } from './plan-placements.js';
import type { QueuedStage } from './snapshot.js';
import { sortQueued } from './sort-queued.js';

/** Stages with few distinct priorities, times and ids, so that ties at every term of compareQueued are common. */
const stages = (time: fc.Arbitrary<number>, priority: fc.Arbitrary<number>) =>
  fc
    .array(
      fc.record({
        priority,
        readySince: time,
        submittedAt: fc.option(time, { nil: undefined }),
        job: fc.integer({ min: 0, max: 2 }),
        stage: fc.integer({ min: 0, max: 4 }),
      }),
      { maxLength: 60 },
    )
    .map((xs) =>
      xs.map((x, i): QueuedStage => ({
        stageId: `s${x.stage}`,
        jobId: `j${x.job}`,
        stageName: `n${i}`,
        pool: 'cpu',
        priority: x.priority,
        readySince: x.readySince,
        ...(x.submittedAt === undefined ? {} : { submittedAt: x.submittedAt }),
        resources: { cpuMillis: 1000, memoryBytes: 1, gpu: null },
        placement: { region: null, labels: {} },
      })),
    );

/** Which stage objects, in which order: identity, not equality (equal-looking stages differ in stageName). */
const names = (xs: readonly QueuedStage[]) => xs.map((s) => s.stageName);

describe('sortQueued', () => {
  it('sorts as [...stages].sort(compareQueued), ties and stability included, by packed keys', () => {
    fc.assert(
      fc.property(stages(fc.integer({ min: -3, max: 3 }), fc.integer({ min: -2, max: 12 })), (xs) => {
        expect(names(sortQueued(xs, compareQueued))).toEqual(names([...xs].sort(compareQueued)));
      }),
      { numRuns: 2000 },
    );
  });

  it('sorts the same where keys cannot be packed: fractions, spans too wide, infinities', () => {
    const odd = fc.oneof(fc.constantFrom(0.5, -1.25, 2 ** 52, -(2 ** 52), Infinity), fc.integer({ min: -2, max: 2 }));
    fc.assert(
      fc.property(stages(odd, odd), (xs) => {
        expect(names(sortQueued(xs, compareQueued))).toEqual(names([...xs].sort(compareQueued)));
      }),
      { numRuns: 500 },
    );
  });

  it('sorts server-like times (milliseconds since 1970, a day apart) by packed keys', () => {
    const now = 1_780_000_000_000;
    fc.assert(
      fc.property(stages(fc.integer({ min: now, max: now + 86_400_000 }), fc.constantFrom(0, 10)), (xs) => {
        expect(names(sortQueued(xs, compareQueued))).toEqual(names([...xs].sort(compareQueued)));
      }),
      { numRuns: 200 },
    );
  });
});

describe('sortQueued where compareQueued is circular', () => {
  it('gives what the sort with compareQueued gives: a run of one priority and time mixing stages with and without a submission time', () => {
    // The planner-equivalence counterexample: s05 before s02 (job ids), s02 before s04
    // (readiness), s04 before s05 (stage ids), all of priority 1 and time 1.
    const stage = (stageId: string, priority: number, readySince: number, submittedAt: number | undefined, job: number): QueuedStage => ({
      stageId,
      jobId: `j${job}`,
      stageName: stageId,
      pool: 'cpu',
      priority,
      readySince,
      ...(submittedAt === undefined ? {} : { submittedAt }),
      resources: { cpuMillis: 1, memoryBytes: 1, gpu: null },
      placement: { region: null, labels: {} },
    });
    const xs = [
      stage('s00', 1, 0, undefined, 0),
      stage('s01', 1, 0, undefined, 0),
      stage('s02', 1, 0, 1, 1),
      stage('s03', 0, 0, undefined, 0),
      stage('s04', 1, 1, undefined, 0),
      stage('s05', 1, 1, 1, 0),
    ];
    expect(names(sortQueued(xs, compareQueued))).toEqual(names([...xs].sort(compareQueued)));
  });
});
