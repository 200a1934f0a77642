import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { gpuChoices, shareAllocationProblem, shareRequestProblem, takeShare, WHOLE_GPU_MILLI, type ShareMachine, type ShareRequest } from './gpu-share.js';
import { SharePlanner } from './share-planner.js';
import { chooseShare, SHARE_POLICIES, shareContext } from './share-policies.js';
import { targetWorkload } from './target-workload.js';

const machine = (id: string, gpus: readonly (number | [number, string])[], cpu = 32_000): ShareMachine => ({
  id,
  name: id,
  cpuMillisTotal: cpu,
  cpuMillisFree: cpu,
  memoryBytesTotal: 2 ** 36,
  memoryBytesFree: 2 ** 36,
  gpus: gpus.map((g, index) => (typeof g === 'number' ? { index, type: 't4', freeMilli: g } : { index, type: g[1], freeMilli: g[0] })),
});

const share = (milli: number, cpu = 1000, types: string[] = []): ShareRequest => ({
  cpuMillis: cpu,
  memoryBytes: 2 ** 20,
  gpuCount: 1,
  gpuMilli: milli,
  gpuTypes: types,
});
const whole = (count: number, cpu = 1000, types: string[] = []): ShareRequest => ({
  cpuMillis: cpu,
  memoryBytes: 2 ** 20,
  gpuCount: count,
  gpuMilli: 1000,
  gpuTypes: types,
});

describe('shareRequestProblem', () => {
  it('refuses a share of more than one GPU (1.5 GPUs), and malformed amounts', () => {
    expect(shareRequestProblem({ ...share(750), gpuCount: 2 })).toMatch(/a share is of one GPU only/);
    expect(shareRequestProblem(share(1500))).toMatch(/not 0–1000/);
    expect(shareRequestProblem(share(0))).toMatch(/1 GPUs of 0/);
    expect(shareRequestProblem({ ...whole(1), gpuCount: 1.5 })).toMatch(/not a whole number/);
    expect(shareRequestProblem(share(250))).toBeNull();
    expect(shareRequestProblem(whole(8))).toBeNull();
    expect(shareRequestProblem({ cpuMillis: 1, memoryBytes: 1, gpuCount: 0, gpuMilli: 0, gpuTypes: [] })).toBeNull();
  });
});

describe('gpuChoices', () => {
  it('gives a whole GPU only idle GPUs, the lowest indices of one type', () => {
    const m = machine('m', [400, 1000, [1000, 'a10'], 1000, 1000]);
    expect(gpuChoices(m, whole(2))).toEqual([[1, 3]]);
    expect(gpuChoices(m, whole(1))).toEqual([[2], [1]]);
    expect(gpuChoices(m, whole(4))).toEqual([]);
    expect(gpuChoices(m, whole(1, 1000, ['a10']))).toEqual([[2]]);
  });

  it('offers a share every acceptable GPU with room for it', () => {
    const m = machine('m', [400, 1000, 200, [1000, 'a10']]);
    expect(gpuChoices(m, share(300))).toEqual([[0], [1], [3]]);
    expect(gpuChoices(m, share(300, 1000, ['t4']))).toEqual([[0], [1]]);
    expect(gpuChoices(m, share(500))).toEqual([[1], [3]]);
    expect(gpuChoices(m, share(300, 64_000))).toEqual([]);
  });

  it('is checked again on apply: a whole GPU on a shared one, a share past the room', () => {
    const m = machine('m', [400, 1000]);
    expect(shareAllocationProblem(m, whole(1), [0])).toMatch(/holds shares/);
    expect(shareAllocationProblem(m, share(500), [0])).toMatch(/400 thousandths free/);
    expect(shareAllocationProblem(m, share(400), [0])).toBeNull();
    expect(shareAllocationProblem(m, whole(1), [1])).toBeNull();
  });
});

describe('best fit and packing pack shares', () => {
  it('onto a GPU already shared before an idle one is broken', () => {
    const m = machine('m', [1000, 600, 1000]);
    const ctx = shareContext([m], targetWorkload([share(300)]));
    for (const policy of ['best-fit', 'packing'] as const) expect(chooseShare([m], share(300), policy, ctx)?.gpuIndices, policy).toEqual([1]);
    // No shared GPU has room: the lowest idle one.
    for (const policy of ['best-fit', 'packing'] as const) expect(chooseShare([m], share(700), policy, ctx)?.gpuIndices, policy).toEqual([0]);
  });
});

// ---------------------------------------------------------------- properties

const arbMachines = fc.array(
  fc.record({
    gpus: fc.array(fc.constantFrom('t4', 'a10'), { minLength: 1, maxLength: 8 }),
    cpu: fc.integer({ min: 4, max: 64 }).map((c) => c * 1000),
  }),
  { minLength: 1, maxLength: 4 },
);
const arbRequest: fc.Arbitrary<ShareRequest> = fc.oneof(
  fc
    .record({ milli: fc.integer({ min: 1, max: 999 }), cpu: fc.integer({ min: 0, max: 8 }), t: fc.constantFrom<string[]>([], ['t4'], ['a10']) })
    .map((x) => share(x.milli, x.cpu * 1000, x.t)),
  fc.record({ n: fc.integer({ min: 1, max: 4 }), cpu: fc.integer({ min: 0, max: 8 }) }).map((x) => whole(x.n, x.cpu * 1000)),
  fc.integer({ min: 1, max: 8 }).map((c) => ({ cpuMillis: c * 1000, memoryBytes: 2 ** 20, gpuCount: 0, gpuMilli: 0, gpuTypes: [] })),
);

describe('shares, for every policy', () => {
  it('never put more than 1000 thousandths on a GPU, nor a share beside a whole GPU; the planner and the from-scratch choice agree', () => {
    fc.assert(
      fc.property(arbMachines, fc.array(arbRequest, { minLength: 1, maxLength: 40 }), fc.constantFrom(...SHARE_POLICIES), (specs, requests, policy) => {
        const machines = specs.map((s, i) =>
          machine(
            `m${i}`,
            s.gpus.map((t) => [WHOLE_GPU_MILLI, t] as [number, string]),
            s.cpu,
          ),
        );
        const ctx = shareContext(machines, targetWorkload(requests));
        const planner = new SharePlanner(machines, policy, ctx);
        // The reference: the same decisions from scratch on a copy, and what each GPU holds.
        const copy = machines.map((m) => ({ ...m, gpus: m.gpus.map((g) => ({ ...g })) }));
        const held = new Map<string, { whole: number; shares: number; milli: number }>();
        for (const [draw, r] of requests.entries()) {
          const expected = chooseShare(copy, r, policy, { ...ctx, draw });
          const got = planner.place(r);
          expect(got).toEqual(expected === null ? null : { machineId: expected.machine.id, gpuIndices: expected.gpuIndices });
          if (expected === null) continue;
          for (const i of expected.gpuIndices) {
            const h = held.get(`${expected.machine.id}/${i}`) ?? { whole: 0, shares: 0, milli: 0 };
            if (r.gpuMilli === WHOLE_GPU_MILLI) h.whole += 1;
            else h.shares += 1;
            h.milli += r.gpuMilli;
            held.set(`${expected.machine.id}/${i}`, h);
          }
          takeShare(expected.machine, r, expected.gpuIndices);
        }
        for (const h of held.values()) {
          expect(h.milli).toBeLessThanOrEqual(WHOLE_GPU_MILLI);
          if (h.whole > 0) expect(h).toEqual({ whole: 1, shares: 0, milli: WHOLE_GPU_MILLI });
        }
        for (const m of planner.view()) for (const g of m.gpus) expect(g.freeMilli).toBeGreaterThanOrEqual(0);
        expect(planner.view()).toEqual([...copy].sort((a, b) => (a.name < b.name ? -1 : 1)));
      }),
      { numRuns: 200 },
    );
  });
});
