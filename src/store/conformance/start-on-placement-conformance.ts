import { beforeEach, describe, expect, it } from 'vitest';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import type { AttemptCompletion, Store } from '../store.js';
import { cpuMachine, job, stage } from './fixtures.js';
import { KNOWN_AS_OF_MARGIN_MS } from '../../domain/known-as-of-margin.js';

/**
 * Started at placement (docs/throughput.md): what the pass before a report's commit places on the
 * reporting machine, where the report asked, is written `running` there and then (attempt, stage,
 * job, one event), and the report's result names it; what it places elsewhere, or for a report
 * that did not ask, is `scheduled` as before. A heartbeat that names it in `spare`, or whose list
 * knows only of answers given before its start (`knownAsOf`), is no evidence against it. Run inside storeConformance, whose hooks open a fresh store for each test.
 */
export function startOnPlacementConformance(storeOf: () => Store): void {
  describe('started at placement', () => {
    let store: Store;
    const now = 1_700_000_000_000;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
    });
    const on = (stageId: string, machineId: string): PlannedPlacement => ({ stageId, machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 });
    const EXITED = { kind: 'exited', detail: null } as const;
    /** A clean exit of `a`, as its agent reports it. */
    const done = (a: { id: string; token: number }): AttemptCompletion => ({
      attemptId: a.id,
      token: a.token,
      exitCode: 0,
      signal: null,
      end: EXITED,
      outputs: [],
    });
    /** The report of a's outcome, asking to start what it makes room for, or not (an older agent). */
    const reportEnd = (machineId: string, a: { id: string; token: number }, startOnPlacement: boolean) =>
      store.machineReport({ machineId, started: [], completed: [done(a)], now: now + 5, leaseMs: LEASE, jitter: () => 0, startOnPlacement });

    /**
     * m1 runs a of a job a → b; c, of another job, waits. The pass installed before each commit
     * places b on m1 and c on m2, whenever they are ready: what a report of a's outcome makes room for.
     */
    const setUp = async () => {
      const m1 = await store.machineRegister({ ...cpuMachine('m1'), now });
      const m2 = await store.machineRegister({ ...cpuMachine('m2'), now });
      const p = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name: 'p' }), source: null, now });
      const q = await store.jobSubmit({ definition: job([stage('c')], { name: 'q' }), source: null, now });
      const [a, b] = [p.stages[0]!, p.stages[1]!];
      const c = q.stages[0]!;
      const placedA = (await store.planApply({ plan: { placements: [on(a.id, m1.id)], pending: [] }, now, leaseMs: LEASE })).applied[0]!;
      await store.machineReport({
        machineId: m1.id,
        started: [{ attemptId: placedA.id, token: placedA.token, pid: null }],
        completed: [],
        now,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      const errors: unknown[] = [];
      store.placeBeforeCommit(
        async (source) => {
          await source.planApply({ plan: { placements: [on(b.id, m1.id), on(c.id, m2.id)], pending: [] }, now: now + 5, leaseMs: LEASE });
        },
        (err) => errors.push(err),
      );
      return { m1, m2, p, q, a: placedA, errors };
    };
    const attemptsOf = async (jobId: string, name: string) => (await store.jobGet({ jobId }))!.stages.find((s) => s.name === name)!;

    it("a report that asks: the work placed on its machine runs at once, in its transaction; another machine's is only placed", async () => {
      const { m1, p, q, a, errors } = await setUp();
      const r = await reportEnd(m1.id, a, true);
      expect(errors).toEqual([]);
      expect(r.completed[0]!.result).toBe('ok');
      const b = await attemptsOf(p.id, 'b');
      expect(b.state).toBe('running');
      expect(b.attempts.map((x) => [x.state, x.startedAt, x.pid])).toEqual([['running', now + 5, null]]);
      expect(r.startedOnPlacement).toEqual([b.attempts[0]!.id]);
      expect((await store.jobGet({ jobId: p.id }))!.state).toBe('running');
      // One event for both moves; no acknowledgement to come.
      const events = (await store.eventsList({ jobId: p.id, limit: 100 })).filter((e) => e.attemptId === b.attempts[0]!.id);
      expect(events.map((e) => e.type)).toEqual(['attempt:running']);
      // With the placement's data: the stage-wait metric reads its waitedMs from this event now (metrics.ts).
      expect(events[0]!.data).toMatchObject({ startedOnPlacement: true, machine: 'm1', pid: null, waitedMs: expect.any(Number) });
      // c, on a machine that did not ask, waits for its agent's acknowledgement as before.
      const c = await attemptsOf(q.id, 'c');
      expect([c.state, c.attempts[0]!.state, c.attempts[0]!.startedAt]).toEqual(['scheduled', 'scheduled', null]);
      expect((await store.jobGet({ jobId: q.id }))!.state).toBe('scheduled');

      // The answer carries it, marked started; a heartbeat's read of placed work does not.
      const given = await store.machineAssignments({ machineId: m1.id, started: r.startedOnPlacement! });
      expect(given.map((x) => [x.attemptId, x.started])).toEqual([[b.attempts[0]!.id, true]]);
      expect(given[0]!.inputs).toEqual([{ stage: 'a', attemptId: a.id, files: [] }]);
      expect(await store.machineAssignments({ machineId: m1.id })).toEqual([]);
      // Another machine's attempt is not handed out as this one's.
      expect(
        await store.machineAssignments({ machineId: (await store.machineList()).find((m) => m.name === 'm2')!.id, started: r.startedOnPlacement! }),
      ).toEqual([expect.objectContaining({ stageName: 'c' })]);

      // Its pid and outcome go as any running attempt's: fenced by its token, recorded once.
      const bb = { id: b.attempts[0]!.id, token: b.attempts[0]!.token };
      const pid = await store.machineReport({
        machineId: m1.id,
        started: [{ attemptId: bb.id, token: bb.token, pid: 4242 }],
        completed: [],
        now: now + 6,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      expect(pid.started[0]!.result).toBe('duplicate');
      expect((await attemptsOf(p.id, 'b')).attempts[0]!.pid).toBe(4242);
      const stale = await store.machineReport({
        machineId: m1.id,
        started: [],
        completed: [{ ...done(bb), token: bb.token + 1 }],
        now: now + 7,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      expect(stale.completed[0]!.result).toBe('stale');
      const end = await store.machineReport({ machineId: m1.id, started: [], completed: [done(bb)], now: now + 8, leaseMs: LEASE, jitter: () => 0 });
      expect(end.completed[0]!.result).toBe('ok');
      expect((await store.jobGet({ jobId: p.id }))!.state).toBe('succeeded');
      // Once started, a canceled one is no longer handed out.
      expect(await store.machineAssignments({ machineId: m1.id, started: r.startedOnPlacement! })).toEqual([]);
    });

    it('a report that does not ask (an older agent) gets its work placed, not started', async () => {
      const { m1, p, a } = await setUp();
      const r = await reportEnd(m1.id, a, false);
      expect(r.startedOnPlacement).toBeUndefined();
      const b = await attemptsOf(p.id, 'b');
      expect([b.state, b.attempts[0]!.state]).toEqual(['scheduled', 'scheduled']);
      expect((await store.eventsList({ jobId: p.id, limit: 100 })).filter((e) => e.attemptId === b.attempts[0]!.id).map((e) => e.type)).toEqual([
        'attempt:scheduled',
      ]);
    });

    it('a heartbeat is no evidence against an attempt it spares; past it, one it does not list is lost', async () => {
      const { m1, p, a } = await setUp();
      const r = await reportEnd(m1.id, a, true);
      const b = r.startedOnPlacement![0]!;
      const beat = (at: number, spare: string[]) =>
        store.machineHeartbeat({ machineId: m1.id, running: [], now: at, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0, spare });
      // Within the time rule nothing is lost, spared or not; past it, only what is spared stays.
      expect((await beat(now + 1000, [])).lost).toEqual([]);
      expect((await beat(now + 6000, [b])).lost).toEqual([]);
      expect((await attemptsOf(p.id, 'b')).attempts[0]!.state).toBe('running');
      expect((await beat(now + 6001, [])).lost).toEqual([b]);
      const stageB = await attemptsOf(p.id, 'b');
      expect(stageB.attempts[0]!.state).toBe('lost');
      // Requeued, and placed again by the next pass (here the same heartbeat's): run once more.
      expect(['ready', 'scheduled']).toContain(stageB.state);
    });

    it('a list that knows only of answers before the start is no evidence, however late it arrives; one that knows past it loses', async () => {
      const { m1, p, a } = await setUp();
      const r = await reportEnd(m1.id, a, true);
      const b = r.startedOnPlacement![0]!;
      // Its start is the report's time, now + 5.
      const beat = (at: number, knownAsOf: number) =>
        store.machineHeartbeat({ machineId: m1.id, running: [], now: at, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0, knownAsOf });
      // Made before the agent read the answer (it knows only of what came before the start), and
      // arriving long after: the time rule alone would lose it (docs/failure-detection.md).
      expect((await beat(now + 60_000, now)).lost).toEqual([]);
      // Knowing past the start, but within the clocks' margin: still no evidence.
      expect((await beat(now + 60_001, now + 5 + KNOWN_AS_OF_MARGIN_MS)).lost).toEqual([]);
      expect((await attemptsOf(p.id, 'b')).attempts[0]!.state).toBe('running');
      // Past the margin: the answer was read, and the list leaves it out.
      expect((await beat(now + 60_002, now + 6 + KNOWN_AS_OF_MARGIN_MS)).lost).toEqual([b]);
      expect((await attemptsOf(p.id, 'b')).attempts[0]!.state).toBe('lost');
    });

    it('knowing past the start does not lose an attempt within the time rule', async () => {
      const { m1, p, a } = await setUp();
      const b = (await reportEnd(m1.id, a, true)).startedOnPlacement![0]!;
      const hb = await store.machineHeartbeat({
        machineId: m1.id,
        running: [],
        now: now + 1000,
        leaseMs: LEASE,
        missingAfterMs: 4000,
        jitter: 0,
        knownAsOf: now + 1000,
      });
      expect(hb.lost).toEqual([]);
      expect((await attemptsOf(p.id, 'b')).attempts.map((x) => [x.id, x.state])).toEqual([[b, 'running']]);
    });
  });
}
