import { beforeEach, describe, expect, it } from 'vitest';
import type { AttemptEnd } from '../../domain/attempt-end.js';
import type { StageDetail } from '../records.js';
import type { Store } from '../store.js';
import { cpuMachine, gpuMachine, job, stage } from './fixtures.js';

/**
 * Every way an attempt ends records its kind (`endKind`, migration 0017) beside its reason: an
 * agent's outcome, through the single verb and a batched report, and the control plane's own ends
 * (lease expired, assignment not acknowledged, machine lost, drained at once, preempted,
 * canceled). Run inside storeConformance, whose hooks open a fresh store for each test.
 */
export function attemptEndConformance(storeOf: () => Store): void {
  describe('attempt ends: the kind recorded', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    const stageOf = async (jobId: string): Promise<StageDetail> => (await store.jobGet({ jobId }))!.stages[0]!;
    /** A one-stage job placed on the machine (and acknowledged unless `started` is false). */
    const running = async (machineId: string, over: Parameters<typeof stage>[1] = {}, started = true) => {
      const j = await store.jobSubmit({ definition: job([stage('a', over)]), source: null, now });
      const s = j.stages[0]!;
      const gpuIndices = over.resources?.gpu ? [0] : [];
      const r = await store.planApply({
        plan: { placements: [{ stageId: s.id, machineId, gpuIndices, cpuMillis: 1000, memoryBytes: 2 ** 20 }], pending: [] },
        now,
        leaseMs: LEASE,
      });
      const a = r.applied[0]!;
      if (started) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 7, now, leaseMs: LEASE });
      return { jobId: j.id, stageId: s.id, a };
    };
    const complete = (a: { id: string; token: number }, end: AttemptEnd, exitCode: number | null = null, signal: string | null = null) =>
      store.attemptComplete({ attemptId: a.id, token: a.token, exitCode, signal, end, outputs: [], now, jitter: 0 });

    /** The `end` of each of the job's events of this type, in order. */
    const endsInEvents = async (jobId: string, type: string) =>
      (await store.eventsList({ jobId, limit: 100 })).filter((e) => e.type === type).map((e) => e.data.end);

    it("an agent's outcome: the kind and its detail, a success as exited with none", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const ok = await running(m.id);
      await complete(ok.a, { kind: 'exited', detail: null }, 0);
      expect((await stageOf(ok.jobId)).attempts[0]).toMatchObject({ state: 'succeeded', endKind: 'exited', reason: null });
      const slow = await running(m.id);
      await complete(slow.a, { kind: 'timeout', detail: 'timeout after 5 s' }, null, 'SIGTERM');
      const s = await stageOf(slow.jobId);
      expect(s.attempts[0]).toMatchObject({ state: 'failed', endKind: 'timeout', reason: 'timeout after 5 s', signal: 'SIGTERM' });
      expect(s.state).toBe('ready');
    });

    it('an exit 0 that says more than that is no success: outputs that failed to upload are a failure', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const r = await running(m.id);
      await complete(r.a, { kind: 'outputs-failed', detail: 'output upload failed: EPIPE (the process exited 0)' }, 0);
      expect((await stageOf(r.jobId)).attempts[0]).toMatchObject({ state: 'failed', endKind: 'outputs-failed' });
    });

    it('a spawn failure in a batched report is recorded as such and fails the stage for good, whatever budget is left', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const r = await running(m.id, { retry: { maxAttempts: 5, backoff: { initialSeconds: 1, maxSeconds: 1 }, onExitCodes: null, maxLost: 5 } });
      const rep = await store.machineReport({
        machineId: m.id,
        started: [],
        completed: [{ attemptId: r.a.id, token: r.a.token, exitCode: null, signal: null, end: { kind: 'spawn-failed', detail: 'no such file' }, outputs: [] }],
        now,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      expect(rep.completed[0]!.result).toBe('ok');
      const s = await stageOf(r.jobId);
      expect(s.attempts[0]).toMatchObject({ state: 'failed', endKind: 'spawn-failed', reason: 'no such file' });
      expect(s.state).toBe('failed');
      expect(s.endReason).toMatch(/not retryable/);
    });

    it('lost: a lease expired, an assignment not acknowledged, a machine lost, a machine drained at once', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const leased = await running(m.id);
      const unacked = await running(m.id, {}, false);
      now += 31_000;
      await store.attemptsReap({ now, ackTimeoutMs: 30_000, jitter: 0 });
      expect((await stageOf(leased.jobId)).attempts[0]).toMatchObject({ state: 'lost', endKind: 'lost', reason: 'lease expired without renewal' });
      expect((await stageOf(unacked.jobId)).attempts[0]).toMatchObject({ state: 'lost', endKind: 'lost' });

      const silent = await store.machineRegister({ ...cpuMachine('c2'), now });
      const gone = await running(silent.id);
      now += 11_000;
      await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0 });
      expect((await stageOf(gone.jobId)).attempts[0]).toMatchObject({ state: 'lost', endKind: 'lost', reason: 'machine c2 lost' });

      const drained = await store.machineRegister({ ...cpuMachine('c3'), now });
      const stopped = await running(drained.id);
      await store.machineDrain({ machine: 'c3', now, stopRunning: true, jitter: 0 });
      expect((await stageOf(stopped.jobId)).attempts[0]).toMatchObject({ state: 'lost', endKind: 'lost' });
      // The events carry the kind too, as an outcome's do: what a reader of the stream decides on.
      for (const j of [leased, unacked, gone, stopped]) expect(await endsInEvents(j.jobId, 'attempt:lost')).toEqual(['lost']);
    });

    it('preempted, and killed when its job is canceled; an attempt still active has none', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 1), now });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['h100'] } };
      const victim = await running(m.id, { resources: gpu, preemptible: true });
      expect((await stageOf(victim.jobId)).attempts[0]!.endKind).toBeNull();
      await store.planApply({
        plan: {
          placements: [],
          pending: [],
          preemptions: [
            {
              stageId: 'stg-x',
              machineId: m.id,
              victims: [{ attemptId: victim.a.id, token: victim.a.token, stageId: victim.stageId }],
              reason: 'preempted for a test',
            },
          ],
        },
        now,
        leaseMs: LEASE,
      });
      expect((await stageOf(victim.jobId)).attempts[0]).toMatchObject({ state: 'preempted', endKind: 'preempted', reason: 'preempted for a test' });

      const c = await store.machineRegister({ ...cpuMachine('c1'), now });
      const canceled = await running(c.id);
      await store.jobCancel({ jobId: canceled.jobId, now, reason: 'canceled by user' });
      expect((await stageOf(canceled.jobId)).attempts[0]).toMatchObject({ state: 'canceled', endKind: 'killed', reason: 'canceled by user' });
      expect(await endsInEvents(victim.jobId, 'attempt:preempted')).toEqual(['preempted']);
      expect(await endsInEvents(canceled.jobId, 'attempt:canceled')).toEqual(['killed']);
    });
  });
}
