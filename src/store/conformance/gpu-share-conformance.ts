import { beforeEach, describe, expect, it } from 'vitest';
import type { Resources } from '../../domain/resources.js';
import type { Store } from '../store.js';
import { gpuMachine, job, stage } from './fixtures.js';

const GiB = 2 ** 30;

/**
 * Shares of a GPU in the store (issue 29), as every adapter must keep them: what attempts hold of
 * each GPU in thousandths and GPU memory, the planner's view of it, the apply step's re-check
 * (shares sum to at most 1000 on a GPU, a whole GPU never with a share), team usage in amounts
 * and the assignment that tells the agent its share. Run inside storeConformance, whose hooks open
 * a fresh store for each test and close it.
 */
export function gpuShareConformance(storeOf: () => Store): void {
  describe('shares of a GPU', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    const share = (milli: number, memoryBytes?: number): Resources => ({
      cpuMillis: 1000,
      memoryBytes: 2 ** 28,
      gpu: { count: 1, milli, types: ['h100'], ...(memoryBytes !== undefined ? { memoryBytes } : {}) },
    });
    const whole = (count = 1): Resources => ({ cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count, types: ['h100'] } });

    /** Submits a one-stage job asking for `resources` and applies a plan placing it on `gpuIndices`, as the planner would. */
    const placeOn = async (machineId: string, resources: Resources, gpuIndices: number[], p: { team?: string; preemptible?: boolean } = {}) => {
      const j = await store.jobSubmit({
        definition: job([stage('a', { resources, ...(p.preemptible ? { preemptible: true } : {}) })], p.team ? { team: p.team } : {}),
        source: null,
        now,
      });
      const gpu = resources.gpu!;
      return store.planApply({
        plan: {
          placements: [
            {
              stageId: j.stages[0]!.id,
              machineId,
              gpuIndices,
              ...(gpu.milli !== undefined ? { gpuMilli: gpu.milli } : {}),
              ...(gpu.memoryBytes !== undefined ? { gpuMemoryBytes: gpu.memoryBytes } : {}),
              cpuMillis: resources.cpuMillis,
              memoryBytes: resources.memoryBytes,
            },
          ],
          pending: [],
        },
        now,
        leaseMs: LEASE,
      });
    };
    const gpusOf = async (machineId: string) => (await store.clusterView()).machines.find((m) => m.id === machineId)!.gpus;

    it('takes shares of one GPU while their thousandths sum to at most 1000, and shows what is left', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 2), now });
      const half = await placeOn(m.id, share(500), [0]);
      expect(half.applied).toHaveLength(1);
      expect(half.applied[0]).toMatchObject({ gpuIndices: [0], gpuMilli: 500, gpuMemoryBytes: null });
      expect(await gpusOf(m.id)).toMatchObject([
        { index: 0, free: false, freeMilli: 500 },
        { index: 1, free: true, freeMilli: 1000 },
      ]);
      expect((await placeOn(m.id, share(250), [0])).applied).toHaveLength(1);
      expect((await placeOn(m.id, share(250), [0])).applied).toHaveLength(1);
      expect((await gpusOf(m.id))[0]).toMatchObject({ free: false, freeMilli: 0 });
      // Full: one thousandth more is refused, and says why.
      const over = await placeOn(m.id, share(1), [0]);
      expect(over.applied).toHaveLength(0);
      expect(over.skipped).toEqual([{ stageId: expect.any(String), why: 'machine no longer has room' }]);
      // The machine's allocation lists each GPU once, with what is held of it.
      const listed = (await store.machineList()).find((x) => x.id === m.id)!;
      expect(listed.allocated.gpuIndices).toEqual([0]);
      expect(listed.allocated.gpuHeld).toEqual([{ index: 0, milli: 1000, memoryBytes: 0 }]);
      expect(listed.allocated.attempts).toBe(3);
    });

    it('never puts a whole GPU on a shared one, nor a share on a GPU held whole', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 2), now });
      expect((await placeOn(m.id, share(250), [0])).applied).toHaveLength(1);
      expect((await placeOn(m.id, whole(), [0])).applied).toHaveLength(0);
      expect((await placeOn(m.id, whole(2), [0, 1])).applied).toHaveLength(0);
      expect((await placeOn(m.id, whole(), [1])).applied).toHaveLength(1);
      expect((await placeOn(m.id, share(100), [1])).applied).toHaveLength(0);
      expect(await gpusOf(m.id)).toMatchObject([
        { index: 0, free: false, freeMilli: 750 },
        { index: 1, free: false, freeMilli: 0 },
      ]);
      // A share is of one GPU: a plan naming two GPUs for it is refused.
      expect((await placeOn(m.id, share(100), [0, 1])).applied).toHaveLength(0);
    });

    it("holds a share's GPU memory where the machine reports it, and refuses a memory bound where it does not", async () => {
      const reported = await store.machineRegister({
        ...gpuMachine('known', 1, 'h100', { gpus: [{ index: 0, uuid: 'GPU-1', name: 'NVIDIA H100', type: 'h100', memoryMiB: 80 * 1024 }] }),
        now,
      });
      expect((await gpusOf(reported.id))[0]).toMatchObject({ memoryBytesTotal: 80 * GiB, memoryBytesFree: 80 * GiB });
      const first = await placeOn(reported.id, share(250, 60 * GiB), [0]);
      expect(first.applied[0]).toMatchObject({ gpuMilli: 250, gpuMemoryBytes: 60 * GiB });
      expect((await gpusOf(reported.id))[0]).toMatchObject({ freeMilli: 750, memoryBytesFree: 20 * GiB });
      // Thousandths to spare, memory not.
      expect((await placeOn(reported.id, share(250, 30 * GiB), [0])).applied).toHaveLength(0);
      expect((await placeOn(reported.id, share(250, 20 * GiB), [0])).applied).toHaveLength(1);
      expect((await gpusOf(reported.id))[0]).toMatchObject({ freeMilli: 500, memoryBytesFree: 0 });
      expect((await store.machineList()).find((x) => x.id === reported.id)!.allocated.gpuHeld).toEqual([{ index: 0, milli: 500, memoryBytes: 80 * GiB }]);

      const unknown = await store.machineRegister({ ...gpuMachine('unknown', 1), now });
      expect((await gpusOf(unknown.id))[0]!.memoryBytesTotal).toBeNull();
      expect((await placeOn(unknown.id, share(250, GiB), [0])).applied).toHaveLength(0);
      expect((await placeOn(unknown.id, share(250), [0])).applied).toHaveLength(1);
    });

    it('a whole GPU with a memory bound needs that much memory in all', async () => {
      const m = await store.machineRegister({
        ...gpuMachine('small', 1, 'h100', { gpus: [{ index: 0, uuid: null, name: 'H100', type: 'h100', memoryMiB: 40 * 1024 }] }),
        now,
      });
      expect((await placeOn(m.id, { ...whole(), gpu: { count: 1, types: ['h100'], memoryBytes: 80 * GiB } }, [0])).applied).toHaveLength(0);
      const fits = await placeOn(m.id, { ...whole(), gpu: { count: 1, types: ['h100'], memoryBytes: 40 * GiB } }, [0]);
      expect(fits.applied[0]).toMatchObject({ gpuMilli: 1000, gpuMemoryBytes: 40 * GiB });
      expect((await gpusOf(m.id))[0]).toMatchObject({ free: false, freeMilli: 0 });
    });

    it('frees only what a share held when it ends', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 1), now });
      const a = (await placeOn(m.id, share(500), [0])).applied[0]!;
      const b = (await placeOn(m.id, share(500), [0])).applied[0]!;
      for (const x of [a, b]) await store.attemptStart({ attemptId: x.id, token: x.token, pid: 7, now, leaseMs: LEASE });
      const complete = (x: { id: string; token: number }) =>
        store.attemptComplete({
          attemptId: x.id,
          token: x.token,
          exitCode: 0,
          signal: null,
          end: { kind: 'exited' as const, detail: null },
          outputs: [],
          now,
          jitter: 0,
        });
      const heartbeat = (running: { id: string; token: number }[]) =>
        store.machineHeartbeat({
          machineId: m.id,
          running: running.map((x) => ({ attemptId: x.id, token: x.token })),
          now,
          leaseMs: LEASE,
          missingAfterMs: 4000,
          jitter: 0,
        });
      expect((await gpusOf(m.id))[0]!.freeMilli).toBe(0);
      // Its outcome says its process is gone: its half is free, the other half still held.
      await complete(a);
      await heartbeat([b]);
      expect((await gpusOf(m.id))[0]).toMatchObject({ free: false, freeMilli: 500 });
      expect((await placeOn(m.id, whole(), [0])).applied).toHaveLength(0);
      await complete(b);
      await heartbeat([]);
      expect((await gpusOf(m.id))[0]).toMatchObject({ free: true, freeMilli: 1000 });
      expect((await placeOn(m.id, whole(), [0])).applied).toHaveLength(1);
    });

    it("counts a share in its team's usage as its part of a GPU, exactly", async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 2), now });
      for (const milli of [100, 200, 250]) expect((await placeOn(m.id, share(milli), [0], { team: 'vision' })).applied).toHaveLength(1);
      expect((await placeOn(m.id, whole(), [1], { team: 'vision' })).applied).toHaveLength(1);
      const vision = (await store.schedulerTeams({ usage: true })).find((t) => t.name === 'vision')!;
      // 0.1 + 0.2 is 0.30000000000000004 in floating point: summed in thousandths it is 0.55.
      expect(vision.usage.gpus).toEqual({ h100: 1.55 });
    });

    it('tells the planner what running shares and held shares hold, and the agent its share', async () => {
      const gpus = [0, 1].map((index) => ({ index, uuid: `GPU-${index}`, name: 'NVIDIA H100', type: 'h100', memoryMiB: 80 * 1024 }));
      const m = await store.machineRegister({ ...gpuMachine('g1', 2, 'h100', { gpus }), now });
      const a = (await placeOn(m.id, share(250, 4 * GiB), [0], { preemptible: true })).applied[0]!;
      const w = (await placeOn(m.id, whole(), [1], { preemptible: true })).applied[0]!;
      const running = await store.preemptionView();
      expect(running.find((r) => r.attemptId === a.id)).toMatchObject({ gpuIndices: [0], gpuMilli: 250, gpuMemoryBytes: 4 * GiB });
      const wholeRunning = running.find((r) => r.attemptId === w.id)!;
      expect(wholeRunning.gpuIndices).toEqual([1]);
      expect(wholeRunning.gpuMilli ?? 1000).toBe(1000);
      const held = await store.heldUntil({ machineIds: [m.id], now });
      expect(held.find((h) => h.gpuIndices[0] === 0)).toMatchObject({ gpuMilli: 250 });
      expect(held.find((h) => h.gpuIndices[0] === 1)!.gpuMilli ?? 1000).toBe(1000);
      const assignments = await store.machineAssignments({ machineId: m.id });
      expect(assignments.find((x) => x.attemptId === a.id)).toMatchObject({ gpuIndices: [0], gpuShare: { milli: 250, memoryBytes: 4 * GiB } });
      expect(assignments.find((x) => x.attemptId === w.id)!.gpuShare).toBeUndefined();
      // What runs where shows the share too.
      expect((await store.attemptsHeld()).find((x) => x.id === a.id)).toMatchObject({ gpuMilli: 250, gpuMemoryBytes: 4 * GiB });
    });

    it("a rerun that reuses a share's output counts its part of a GPU in the GPU-hours saved", async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 1), now });
      const once = { retry: { maxAttempts: 1, backoff: { initialSeconds: 1, maxSeconds: 10 }, onExitCodes: null, maxLost: 5 } };
      const j = await store.jobSubmit({
        definition: job([stage('infer', { resources: share(250) }), stage('report', { needs: ['infer'], ...once })]),
        source: null,
        now,
      });
      const end = async (jobId: string, stageName: string, gpus: number[], exitCode: number, runMs: number) => {
        const s = (await store.jobGet({ jobId }))!.stages.find((x) => x.name === stageName)!;
        const gpu = s.definition.resources.gpu;
        const plan = {
          placements: [
            { stageId: s.id, machineId: m.id, gpuIndices: gpus, ...(gpu?.milli ? { gpuMilli: gpu.milli } : {}), cpuMillis: 1000, memoryBytes: 2 ** 28 },
          ],
          pending: [],
        };
        const a = (await store.planApply({ plan, now, leaseMs: LEASE })).applied[0]!;
        await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
        await store.attemptComplete({
          attemptId: a.id,
          token: a.token,
          exitCode,
          signal: null,
          end: { kind: 'exited', detail: null },
          outputs: [],
          now: now + runMs,
          jitter: 0,
        });
      };
      await end(j.id, 'infer', [0], 0, 3_600_000);
      await end(j.id, 'report', [], 1, 1000);
      now += 10_000;
      const r = (await store.jobRerun({ jobId: j.id, now }))!;
      expect(r.plan.reused.map((x) => [x.stage, x.gpus])).toEqual([['infer', 0.25]]);
      expect(r.plan.gpuMsSaved).toBe(0.25 * 3_600_000);
      expect(r.job!.stages.find((x) => x.name === 'infer')!.reused).toMatchObject({ runMs: 3_600_000, gpus: 0.25 });
      // A rerun of the rerun reuses it again, from what the first rerun recorded.
      await end(r.job!.id, 'report', [], 1, 0);
      const again = (await store.jobRerun({ jobId: r.job!.id, now }))!;
      expect(again.plan.reused.map((x) => [x.stage, x.gpus])).toEqual([['infer', 0.25]]);
    });
  });
}
