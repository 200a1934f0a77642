import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { WHOLE_GPU_MILLI, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { SHARE_POLICIES, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';

/** Machines of a few kinds, many alike (what groups them), named in index order. */
const KINDS: { gpus: string[]; cpu: number }[] = [
  { gpus: ['t4', 't4'], cpu: 16_000 },
  { gpus: Array.from({ length: 8 }, () => 'a10'), cpu: 64_000 },
  { gpus: ['t4', 'a10', 'a10', 't4'], cpu: 32_000 },
  { gpus: [], cpu: 8_000 },
];

const machineOf = (i: number, kind: number): ShareMachine => ({
  id: `id${i}`,
  name: `m${String(i).padStart(3, '0')}`,
  cpuMillisTotal: KINDS[kind]!.cpu,
  cpuMillisFree: KINDS[kind]!.cpu,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: KINDS[kind]!.gpus.map((type, index) => ({ index, type, freeMilli: WHOLE_GPU_MILLI, memoryBytesTotal: 2 ** 34 })),
});

const arbRequest: fc.Arbitrary<ShareRequest> = fc.oneof(
  fc
    .record({ milli: fc.constantFrom(250, 500, 700), cpu: fc.integer({ min: 0, max: 8 }), t: fc.constantFrom<string[]>([], ['t4'], ['a10']) })
    .map((x) => ({ cpuMillis: x.cpu * 1000, memoryBytes: 2 ** 30, gpuCount: 1, gpuMilli: x.milli, gpuTypes: x.t })),
  fc
    .record({ n: fc.integer({ min: 1, max: 4 }), cpu: fc.integer({ min: 0, max: 16 }), t: fc.constantFrom<string[]>([], ['t4'], ['a10']) })
    .map((x) => ({ cpuMillis: x.cpu * 1000, memoryBytes: 2 ** 30, gpuCount: x.n, gpuMilli: WHOLE_GPU_MILLI, gpuTypes: x.t })),
);

describe('SharePlanner.chooseInGroups', () => {
  it('chooses as choose() with the class filter and the bars, through placements that move machines between groups', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: KINDS.length - 1 }), fc.integer({ min: 0, max: 2 })), { minLength: 1, maxLength: 30 }),
        fc.array(
          fc.record({
            r: arbRequest,
            // Classes allowed for this request (a bit per class), machines barred (held), whether it is taken.
            allowed: fc.integer({ min: 0, max: 7 }),
            barred: fc.array(fc.nat(), { maxLength: 4 }),
            take: fc.boolean(),
            named: fc.boolean(),
          }),
          { minLength: 1, maxLength: 40 },
        ),
        fc.constantFrom(...SHARE_POLICIES.filter((p) => p !== 'random')),
        (specs, steps, policy) => {
          const machines = specs.map(([kind], i) => machineOf(i, kind));
          const classOf = Int32Array.from(specs.map(([, c]) => c));
          const ctx = shareContext(machines, targetWorkload(steps.map((s) => s.r)));
          const grouped = new SharePlanner(machines, policy, ctx);
          const scanned = new SharePlanner(machines, policy, ctx);
          for (const { r, allowed, barred, take, named } of steps) {
            const bars = new Set(barred.map((b) => b % machines.length));
            const allowedClass = (c: number) => (allowed & (1 << c)) !== 0;
            // Named by its mask half the time: the groups it allows are then kept under that name.
            const got = grouped.chooseInGroups(r, classOf, allowedClass, (i) => bars.has(i), named ? `mask ${allowed}` : undefined);
            const want = scanned.choose(r, (i) => allowedClass(classOf[i]!) && !bars.has(i));
            expect(got).toEqual(want);
            if (got === null || !take) continue;
            grouped.take(r, got);
            scanned.take(r, got);
          }
          expect(grouped.view()).toEqual(scanned.view());
        },
      ),
      { numRuns: 300 },
    );
  });
});
