import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { StaleAttemptError } from '../../domain/errors.js';
import type { LogPiece, StageDetail } from '../records.js';
import type { Store } from '../store.js';
import { blobKey, cpuMachine, gpuMachine, job, stage } from './fixtures.js';
import { machineSchedulingConformance } from './machine-scheduling-conformance.js';
import { heartbeatPeriodConformance } from './heartbeat-period-conformance.js';
import { rerunConformance } from './rerun-conformance.js';
import { tokenConformance } from './token-conformance.js';
import { auditConformance } from './audit-conformance.js';
import { dashboardConformance } from './dashboard-conformance.js';
import { attemptEndConformance } from './attempt-end-conformance.js';
import { containmentConformance } from './containment-conformance.js';
import { outputLimitsConformance } from './output-limits-conformance.js';
import { gpuShareConformance } from './gpu-share-conformance.js';
import { autoscaleConformance } from './autoscale-conformance.js';
import { gangConformance } from './gang-conformance.js';
import { gangOutputsConformance } from './gang-outputs-conformance.js';
import { gangPortConformance } from './gang-port-conformance.js';
import { gangPreemptionConformance } from './gang-preemption-conformance.js';
import { gangHeldUntilConformance } from './gang-held-until-conformance.js';
import { startOnPlacementConformance } from './start-on-placement-conformance.js';

/** A log piece of ASCII text (its bytes are its characters). */
function piece(stream: LogPiece['stream'], offset: number, data: string): LogPiece {
  return { stream, offset, bytes: Buffer.byteLength(data), data };
}

/**
 * The behaviour every Store adapter must show. An adapter's test file calls this with a factory
 * that returns a fresh, migrated, empty store; the same assertions run against each.
 */
export function storeConformance(adapter: string, open: () => Promise<Store>): void {
  describe(`Store conformance: ${adapter}`, () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(async () => {
      store = await open();
      now = 1_700_000_000_000;
    });
    afterEach(async () => {
      await store.close();
    });

    const stageOf = async (jobId: string, name: string): Promise<StageDetail> => {
      const j = await store.jobGet({ jobId });
      return j!.stages.find((s) => s.name === name)!;
    };
    const place = async (jobId: string, name: string, machineId: string, gpuIndices: number[] = []) => {
      const s = await stageOf(jobId, name);
      const r = await store.planApply({
        plan: {
          placements: [{ stageId: s.id, machineId, gpuIndices, cpuMillis: s.definition.resources.cpuMillis, memoryBytes: s.definition.resources.memoryBytes }],
          pending: [],
        },
        now,
        leaseMs: LEASE,
      });
      return r;
    };
    /** The agent's outcome, exited with `exitCode`, with the sizes its log files had. */
    const exited = (a: { id: string; token: number }, exitCode: number, logBytes: { stdout: number; stderr: number }) =>
      store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        logBytes,
        now,
        jitter: 0,
      });
    const heartbeat = (machineId: string, running: { attemptId: string; token: number }[]) =>
      store.machineHeartbeat({ machineId, running, now, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0 });
    const runToEnd = async (jobId: string, name: string, machineId: string, exitCode = 0) => {
      const r = await place(jobId, name, machineId);
      const a = r.applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 123, now, leaseMs: LEASE });
      await store.outputUploaded({ attemptId: a.id, token: a.token, path: 'out.txt', blob: blobKey(`${a.id}/out.txt`), size: 3, now });
      return store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [{ path: 'out.txt', size: 3 }],
        now,
        jitter: 0.5,
      });
    };

    it('a ready stage past its queueTimeoutSeconds fails, saying why; its dependents are skipped and the job fails', async () => {
      const j = await store.jobSubmit({
        definition: job([stage('a', { queueTimeoutSeconds: 5 }), stage('b', { needs: ['a'] }), stage('c')]),
        source: null,
        now,
      });
      expect(await store.stagesPastQueueTimeout({ now: now + 5000, limit: 10 })).toEqual([]);
      const over = await store.stagesPastQueueTimeout({ now: now + 5001, limit: 10 });
      expect(over.map((o) => [o.name, o.waitedMs])).toEqual([['a', 5001]]);
      expect(await store.stageQueueTimeout({ stageId: over[0]!.stageId, reason: 'waited 5 s: no machine', now: now + 5001 })).toBe(true);
      const after = await store.jobGet({ jobId: j.id });
      expect(after!.stages.map((s) => [s.name, s.state, s.endReason])).toEqual([
        ['a', 'failed', 'waited 5 s: no machine'],
        ['b', 'skipped', 'upstream stage a failed'],
        ['c', 'skipped', 'job failing: stage a failed before this stage started'],
      ]);
      expect(after!.state).toBe('failed');
      expect(await store.stageQueueTimeout({ stageId: over[0]!.stageId, reason: 'again', now: now + 6000 })).toBe(false);
      expect(await store.stagesPastQueueTimeout({ now: now + 60_000, limit: 10 })).toEqual([]);
      // A stage without the setting waits as long as it takes.
      await store.jobSubmit({ definition: job([stage('patient')]), source: null, now });
      expect(await store.stagesPastQueueTimeout({ now: now + 10 ** 9, limit: 10 })).toEqual([]);
    });

    it('leader lease: one holder at a time, a new term on takeover; a deposed leader writes nothing', async () => {
      const a = await store.leaderClaim({ holder: 'a', now, ttlMs: 5000 });
      expect(a).toMatchObject({ holder: 'a', term: 1, leader: true, expiresAt: now + 5000 });
      expect(await store.leaderClaim({ holder: 'b', now: now + 1000, ttlMs: 5000 })).toMatchObject({ holder: 'a', term: 1, leader: false });
      // Renewing keeps the term.
      expect(await store.leaderClaim({ holder: 'a', now: now + 2000, ttlMs: 5000 })).toMatchObject({ term: 1, leader: true, expiresAt: now + 7000 });
      // a stops renewing; once its lease has run out, b takes over with the next term.
      expect(await store.leaderClaim({ holder: 'b', now: now + 7001, ttlMs: 5000 })).toMatchObject({ holder: 'b', term: 2, leader: true });
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const s = await stageOf(j.id, 'a');
      const plan = { placements: [{ stageId: s.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] };
      const late = store.asLeader(() => ({ holder: 'a', term: 1 }));
      await expect(late.planApply({ plan, now: now + 7002, leaseMs: LEASE })).rejects.toMatchObject({ name: 'NotLeaderError' });
      expect((await stageOf(j.id, 'a')).state).toBe('ready');
      const current = store.asLeader(() => ({ holder: 'b', term: 2 }));
      expect((await current.planApply({ plan, now: now + 7002, leaseMs: LEASE })).applied).toHaveLength(1);
      // The deposed leader's reaper, with an assignment past its acknowledgement to lose (the
      // reapers read outside a transaction: with nothing to judge, a pass writes nothing and
      // checks no term), is refused and loses nothing.
      await expect(late.attemptsReap({ now: now + 7010, ackTimeoutMs: 1, jitter: 0 })).rejects.toMatchObject({ name: 'NotLeaderError' });
      // A leader whose own lease ran out is refused too, until it renews.
      await expect(current.attemptsReap({ now: now + 12_002, ackTimeoutMs: 1, jitter: 0 })).rejects.toMatchObject({ name: 'NotLeaderError' });
      expect((await stageOf(j.id, 'a')).state).toBe('scheduled');
      // Resigning hands over at once.
      await store.leaderResign({ holder: 'b', term: 2 });
      expect(await store.leaderClaim({ holder: 'a', now: now + 7003, ttlMs: 5000 })).toMatchObject({ holder: 'a', term: 3, leader: true });
      expect((await store.eventsList({ limit: 100 })).filter((e) => e.type === 'leader:elected').map((e) => e.data.term)).toEqual([1, 2, 3]);
    });

    it("reads the database's clock", async () => {
      const t = await store.databaseNow();
      expect(Math.abs(t - Date.now())).toBeLessThan(5000);
    });

    it('submits a DAG: roots ready, the rest pending, job queued, events and outbox written', async () => {
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] }), stage('c', { needs: ['a'] })]), source: null, now });
      expect(j.state).toBe('queued');
      expect(j.stages.map((s) => [s.name, s.state])).toEqual([
        ['a', 'ready'],
        ['b', 'pending'],
        ['c', 'pending'],
      ]);
      expect(j.stages[0]!.pool).toBe('cpu');
      const events = await store.eventsList({ jobId: j.id, limit: 100 });
      expect(events.map((e) => e.type)).toContain('job:submitted');
      const outbox = await store.outboxPending({ limit: 10 });
      expect(outbox.some((m) => m.topic === 'pool:ready' && m.payload.pool === 'cpu')).toBe(true);
    });

    it('a machine joining wakes a pass only when a stage is ready: no capacity:freed while the queue is empty', async () => {
      const freed = async () => (await store.outboxPending({ limit: 100 })).filter((m) => m.topic === 'capacity:freed').map((m) => m.payload);
      const idle = await store.machineRegister({ ...cpuMachine('c1'), now });
      expect(idle.name).toBe('c1');
      expect(await freed()).toEqual([]);
      // Its event is written all the same.
      expect((await store.eventsList({ limit: 100 })).filter((e) => e.type === 'machine:registered').map((e) => e.machineId)).toEqual([idle.id]);
      await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const joined = await store.machineRegister({ ...cpuMachine('c2'), now });
      expect(await freed()).toEqual([{ machineId: joined.id }]);
      // A machine registering again (not a join) wakes one as before.
      await store.machineRegister({ ...cpuMachine('c1'), now });
      expect(await freed()).toEqual([{ machineId: joined.id }, { machineId: idle.id }]);
    });

    it('lists events newest first, of no job only, of one noun only (what GET /v1/autoscale reads its decisions with)', async () => {
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      await store.machineRegister({ ...cpuMachine('c1'), now });
      await store.machineRegister({ ...cpuMachine('c2'), now });
      const all = await store.eventsList({ limit: 100 });
      const newest = await store.eventsList({ limit: 2, newestFirst: true });
      expect(newest.map((e) => e.seq)).toEqual(
        all
          .slice(-2)
          .map((e) => e.seq)
          .reverse(),
      );
      const jobless = await store.eventsList({ jobId: null, limit: 100 });
      expect(jobless.length).toBeGreaterThan(0);
      expect(jobless.every((e) => e.jobId === null)).toBe(true);
      expect(jobless.map((e) => e.seq)).toEqual(all.filter((e) => e.jobId === null).map((e) => e.seq));
      const registered = await store.eventsList({ jobId: null, noun: 'machine', newestFirst: true, limit: 100 });
      expect(registered.map((e) => e.type)).toEqual(['machine:registered', 'machine:registered']);
      expect(registered[0]!.seq).toBeGreaterThan(registered[1]!.seq);
      expect((await store.eventsList({ noun: 'job', limit: 100 })).every((e) => e.type.startsWith('job:') && e.jobId === j.id)).toBe(true);
      expect(await store.eventsList({ noun: 'nothing', limit: 100 })).toEqual([]);
    });

    it('submits a batch in one go: every job as a single submit writes it, ids in order, each pool told once', async () => {
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: [] } };
      const definitions = [
        job([stage('a'), stage('b', { needs: ['a'] })], { name: 'first', team: 'new-team' }),
        job([stage('g', { resources: gpu })], { name: 'second' }),
        job([stage('x'), stage('y')], { name: 'third', priority: 7 }),
      ];
      const ids = await store.jobSubmitBatch({ definitions, sources: ['one', null, 'three'], now });
      expect(ids).toHaveLength(3);
      const jobs = await Promise.all(ids.map((jobId) => store.jobGet({ jobId })));
      expect(jobs.map((j) => [j!.name, j!.team, j!.priority, j!.state])).toEqual([
        ['first', 'new-team', 50, 'queued'],
        ['second', 'default', 50, 'queued'],
        ['third', 'default', 7, 'queued'],
      ]);
      expect(jobs[0]!.stages.map((s) => [s.name, s.state])).toEqual([
        ['a', 'ready'],
        ['b', 'pending'],
      ]);
      expect(jobs[1]!.stages[0]!.pool).not.toBe('cpu');
      // The same events as one submit each: submitted, then queued.
      const single = await store.jobSubmit({ definition: definitions[0]!, source: null, now });
      const types = async (jobId: string) => (await store.eventsList({ jobId, limit: 100 })).map((e) => e.type);
      for (const id of ids) expect(await types(id)).toEqual(await types(single.id));
      const ready = (await store.outboxPending({ limit: 1000 })).filter((m) => m.topic === 'pool:ready');
      // Two pools in the batch, each told once; then the single submit's.
      expect(ready.map((m) => m.payload.pool)).toEqual([...new Set([jobs[0]!.stages[0]!.pool, jobs[1]!.stages[0]!.pool])].concat('cpu'));
    });

    it('a batch too large for one insert statement is written whole', async () => {
      const stages = Array.from({ length: 5 }, (_, i) => stage(`s${i}`));
      const definitions = Array.from({ length: 2000 }, (_, i) => job(stages, { name: `j${i}` }));
      const ids = await store.jobSubmitBatch({ definitions, now });
      expect(new Set(ids).size).toBe(2000);
      const last = await store.jobGet({ jobId: ids[1999]! });
      expect(last!.name).toBe('j1999');
      expect(last!.stages).toHaveLength(5);
      expect((await store.jobList({ limit: 1000 })).every((j) => j.stageCounts.ready === 5)).toBe(true);
      expect(await store.jobSubmitBatch({ definitions: [], now })).toEqual([]);
    });

    it('an Idempotency-Key makes a repeated submit answer its jobs and a different one conflict', async () => {
      const idem = { scope: 'team:a', key: 'k', requestHash: 'h1' };
      const first = await store.jobSubmit({ definition: job([stage('a')]), source: null, now, idempotency: idem });
      await expect(store.jobSubmit({ definition: job([stage('a')]), source: null, now, idempotency: idem })).rejects.toMatchObject({
        name: 'AlreadySubmitted',
        jobIds: [first.id],
      });
      await expect(
        store.jobSubmitBatch({ definitions: [job([stage('a')])], now, idempotency: { scope: 'team:a', key: 'k', requestHash: 'h2' } }),
      ).rejects.toMatchObject({
        name: 'ConflictError',
      });
      expect(await store.jobList({ limit: 10 })).toHaveLength(1);
      expect(await store.idempotencyPrune({ before: now })).toBe(0);
      expect(await store.idempotencyPrune({ before: now + 1 })).toBe(1);
    });

    it("an Idempotency-Key is its scope's: the same key and request in another scope is a fresh key", async () => {
      const a = { scope: 'team:a', key: 'shared', requestHash: 'h' };
      const b = { ...a, scope: 'team:b' };
      const jobA = await store.jobSubmit({ definition: job([stage('a')], { team: 'a' }), source: null, now, idempotency: a });
      // Another scope with the same key and request: a job of its own, not the first scope's.
      const jobB = await store.jobSubmit({ definition: job([stage('a')], { team: 'b' }), source: null, now, idempotency: b });
      expect(jobB.id).not.toBe(jobA.id);
      // A different request with that key in a third scope is no conflict either (a batch's too).
      const [jobC] = await store.jobSubmitBatch({ definitions: [job([stage('a')])], now, idempotency: { ...a, scope: 'token:t1', requestHash: 'other' } });
      expect([jobA.id, jobB.id]).not.toContain(jobC);
      // Each scope's repeat answers its own job.
      await expect(store.jobSubmit({ definition: job([stage('a')], { team: 'a' }), source: null, now, idempotency: a })).rejects.toMatchObject({
        name: 'AlreadySubmitted',
        jobIds: [jobA.id],
      });
      await expect(store.jobSubmit({ definition: job([stage('a')], { team: 'b' }), source: null, now, idempotency: b })).rejects.toMatchObject({
        name: 'AlreadySubmitted',
        jobIds: [jobB.id],
      });
      expect(await store.jobList({ limit: 10 })).toHaveLength(3);
      expect(await store.idempotencyPrune({ before: now + 1 })).toBe(3);
    });

    it('lists jobs newest first with stage counts, filtered by state', async () => {
      const a = await store.jobSubmit({ definition: job([stage('x')], { name: 'first' }), source: null, now });
      now += 1;
      const b = await store.jobSubmit({ definition: job([stage('x')], { name: 'second' }), source: null, now });
      const list = await store.jobList({ limit: 10 });
      expect(list.map((j) => j.id)).toEqual([b.id, a.id]);
      expect(list[0]!.stageCounts).toEqual({ ready: 1 });
      expect(await store.jobList({ limit: 10, state: 'succeeded' })).toEqual([]);
    });

    it('snapshot shows free capacity and the ready queue; placement holds resources', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 4), now });
      const j = await store.jobSubmit({
        definition: job([stage('train', { resources: { cpuMillis: 2000, memoryBytes: 2 ** 30, gpu: { count: 2, types: ['h100'] } } })]),
        source: null,
        now,
      });
      let snap = await store.schedulerSnapshot({ now, limitPerShape: 100 });
      expect(snap.queue.map((q) => q.pool)).toEqual(['gpu:h100']);
      expect(snap.machines[0]!.gpus.every((g) => g.free)).toBe(true);
      const r = await place(j.id, 'train', m.id, [1, 3]);
      expect(r.applied).toHaveLength(1);
      expect(r.applied[0]!.token).toBe(1);
      snap = await store.schedulerSnapshot({ now, limitPerShape: 100 });
      expect(snap.queue).toEqual([]);
      expect(snap.machines[0]!.gpus.filter((g) => !g.free).map((g) => g.index)).toEqual([1, 3]);
      expect(snap.machines[0]!.cpuMillisFree).toBe(30000);
      expect((await store.jobGet({ jobId: j.id }))!.state).toBe('scheduled');
    });

    it('planApply re-checks: a busy GPU device or a stage no longer ready is skipped', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 2), now });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['h100'] } };
      const j = await store.jobSubmit({ definition: job([stage('a', { resources: gpu }), stage('b', { resources: gpu })]), source: null, now });
      expect((await place(j.id, 'a', m.id, [0])).applied).toHaveLength(1);
      const again = await place(j.id, 'a', m.id, [1]);
      expect(again.skipped[0]!.why).toMatch(/no longer ready/);
      const clash = await place(j.id, 'b', m.id, [0]);
      expect(clash.applied).toHaveLength(0);
      expect(clash.skipped[0]!.why).toMatch(/room/);
    });

    it('a success commits outputs once and frees dependents; the job succeeds at the end', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({
        definition: job([stage('a'), stage('b', { needs: ['a'] }), stage('c', { needs: ['a'] }), stage('d', { needs: ['b', 'c'] })]),
        source: null,
        now,
      });
      const r = await runToEnd(j.id, 'a', m.id);
      expect(r.accepted).toBe(true);
      const a = await stageOf(j.id, 'a');
      expect(a.state).toBe('succeeded');
      expect(a.outputAttemptId).toBe(r.attempt.id);
      expect((await stageOf(j.id, 'b')).state).toBe('ready');
      expect((await stageOf(j.id, 'd')).state).toBe('pending');
      const assignments = await (async () => {
        await place(j.id, 'b', m.id);
        return store.machineAssignments({ machineId: m.id });
      })();
      expect(assignments[0]!.inputs).toEqual([{ stage: 'a', attemptId: r.attempt.id, files: [{ path: 'out.txt', size: 3 }] }]);
      const bAttempt = assignments[0]!;
      await store.attemptComplete({
        attemptId: bAttempt.attemptId,
        token: bAttempt.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      await runToEnd(j.id, 'c', m.id);
      expect((await stageOf(j.id, 'd')).state).toBe('ready');
      const last = await runToEnd(j.id, 'd', m.id);
      expect(last.jobState).toBe('succeeded');
      expect((await store.jobGet({ jobId: j.id }))!.finishedAt).toBe(now);
    });

    it('a repeated success report changes nothing and says so', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const first = await runToEnd(j.id, 'a', m.id);
      const eventsBefore = (await store.eventsList({ jobId: j.id, limit: 1000 })).length;
      const again = await store.attemptComplete({
        attemptId: first.attempt.id,
        token: first.attempt.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [{ path: 'other', size: 1 }],
        now: now + 5,
        jitter: 0,
      });
      expect(again.accepted).toBe(false);
      expect(again.attempt.outputs).toEqual([{ path: 'out.txt', size: 3 }]);
      expect((await store.eventsList({ jobId: j.id, limit: 1000 })).length).toBe(eventsBefore);
    });

    it('fences: a stale token or an ended attempt is refused and commits nothing', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await expect(store.attemptStart({ attemptId: a.id, token: a.token + 1, pid: 1, now, leaseMs: LEASE })).rejects.toBeInstanceOf(StaleAttemptError);
      await store.jobCancel({ jobId: j.id, now, reason: 'test' });
      await expect(store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE })).rejects.toBeInstanceOf(StaleAttemptError);
      await expect(
        store.attemptComplete({
          attemptId: a.id,
          token: a.token,
          exitCode: 0,
          signal: null,
          end: { kind: 'exited' as const, detail: null },
          outputs: [{ path: 'x', size: 1 }],
          now,
          jitter: 0,
        }),
      ).rejects.toBeInstanceOf(StaleAttemptError);
      expect((await stageOf(j.id, 'a')).outputAttemptId).toBeNull();
    });

    it('a batched report acknowledges, records pids and outcomes of many attempts; each item answered on its own', async () => {
      const m = await store.machineRegister({ ...cpuMachine('m1'), now });
      const other = await store.machineRegister({ ...cpuMachine('m2'), now });
      const jobs = await Promise.all(
        [0, 1, 2].map((i) => store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name: `j${i}` }), source: null, now })),
      );
      const [a0, a1, a2] = await Promise.all(jobs.map(async (j) => (await place(j.id, 'a', m.id)).applied[0]!));
      const foreign = (await place((await store.jobSubmit({ definition: job([stage('x')]), source: null, now })).id, 'x', other.id)).applied[0]!;
      await store.jobCancel({ jobId: jobs[2]!.id, now, reason: 'test' });
      const r1 = await store.machineReport({
        machineId: m.id,
        started: [
          { attemptId: a0!.id, token: a0!.token, pid: null },
          { attemptId: a1!.id, token: a1!.token, pid: null },
          { attemptId: a2!.id, token: a2!.token, pid: null },
          { attemptId: foreign.id, token: foreign.token, pid: null },
          { attemptId: a0!.id, token: a0!.token, pid: 4242 },
        ],
        completed: [],
        now,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      expect(r1.started.map((x) => x.result)).toEqual(['ok', 'ok', 'stale', 'stale', 'duplicate']);
      expect(r1.started[3]!.message).toMatch(/another machine/);
      expect((await stageOf(jobs[0]!.id, 'a')).attempts[0]!.pid).toBe(4242);
      // A stale item changed nothing: the canceled attempt stays canceled, the foreign one scheduled.
      expect((await stageOf(jobs[2]!.id, 'a')).attempts[0]!.state).toBe('canceled');
      expect((await stageOf(foreign.jobId, 'x')).attempts[0]!.state).toBe('scheduled');

      const done = (a: typeof a0, exitCode: number) => ({
        attemptId: a!.id,
        token: a!.token,
        exitCode,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
      });
      const r2 = await store.machineReport({
        machineId: m.id,
        started: [],
        completed: [done(a0, 0), done(a1, 1), { ...done(a2, 0) }],
        now,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      expect(r2.completed.map((x) => x.result)).toEqual(['ok', 'ok', 'stale']);
      expect((await stageOf(jobs[0]!.id, 'b')).state).toBe('ready');
      expect((await stageOf(jobs[1]!.id, 'a')).state).toBe('ready'); // retried after a backoff
      // A resend of the same report: nothing twice.
      const r3 = await store.machineReport({ machineId: m.id, started: [], completed: [done(a0, 0)], now, leaseMs: LEASE, jitter: () => 0 });
      expect(r3.completed[0]!.result).toBe('duplicate');
      const events = await store.eventsList({ jobId: jobs[0]!.id, limit: 100 });
      expect(events.filter((e) => e.type === 'attempt:succeeded')).toHaveLength(1);
      expect(events.filter((e) => e.type === 'attempt:running')).toHaveLength(1);
      await expect(store.machineReport({ machineId: 'm_nope', started: [], completed: [], now, leaseMs: LEASE, jitter: () => 0 })).rejects.toThrow(/machine/);
    });

    it('a failure retries after a backoff, then fails the stage, skips dependents and fails the job', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const retry = { maxAttempts: 2, backoff: { initialSeconds: 4, maxSeconds: 60 }, onExitCodes: null, maxLost: 5 };
      const j = await store.jobSubmit({ definition: job([stage('a', { retry }), stage('b', { needs: ['a'] }), stage('solo')]), source: null, now });
      const first = await runToEnd(j.id, 'a', m.id, 3);
      expect(first.jobState).not.toBe('failed');
      const a = await stageOf(j.id, 'a');
      expect(a.state).toBe('ready');
      expect(a.notBefore).toBe(now + 3000); // equal jitter at 0.5 of 4 s: 2 s + 1 s
      expect(a.pendingReason).toMatch(/exit code 3.*backing off/);
      expect((await store.schedulerSnapshot({ now, limitPerShape: 10 })).queue.map((q) => q.stageName)).toEqual(['solo']);
      now += 3000;
      const second = await runToEnd(j.id, 'a', m.id, 3);
      expect(second.attempt.number).toBe(2);
      const after = await store.jobGet({ jobId: j.id });
      expect(after!.stages.map((s) => [s.name, s.state])).toEqual([
        ['a', 'failed'],
        ['b', 'skipped'],
        ['solo', 'skipped'],
      ]);
      expect(after!.state).toBe('failed');
      expect(after!.failureReason).toMatch(/stage a failed: exit code 3; 2 of 2 attempts used/);
      expect(after!.stages[1]!.endReason).toBe('upstream stage a failed');
    });

    it('onExitCodes: an exit code not listed fails at once', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const retry = { maxAttempts: 5, backoff: { initialSeconds: 1, maxSeconds: 1 }, onExitCodes: [75], maxLost: 5 };
      const j = await store.jobSubmit({ definition: job([stage('a', { retry })]), source: null, now });
      const r = await runToEnd(j.id, 'a', m.id, 2);
      expect(r.jobState).toBe('failed');
      expect((await stageOf(j.id, 'a')).endReason).toMatch(/not retryable/);
    });

    it("the job's failure reason names the stage whose failure failed it, not one that failed after", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 8000 }), now });
      const once = { maxAttempts: 3, backoff: { initialSeconds: 1, maxSeconds: 1 }, onExitCodes: [75], maxLost: 5 };
      // `slow` comes first by position, so a reason read in position order would name it.
      const j = await store.jobSubmit({ definition: job([stage('slow', { retry: once }), stage('exit5', { retry: once })]), source: null, now });
      const slow = (await place(j.id, 'slow', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: slow.id, token: slow.token, pid: 7, now, leaseMs: LEASE });
      const first = await runToEnd(j.id, 'exit5', m.id, 5);
      expect(first.jobState).toBe('running');
      expect((await stageOf(j.id, 'exit5')).endReason).toBe('exit code 5; not retryable');
      now += 2000;
      const last = await store.attemptComplete({
        attemptId: slow.id,
        token: slow.token,
        exitCode: null,
        signal: 'SIGKILL',
        end: { kind: 'timeout', detail: 'timeout after 2 s' },
        outputs: [],
        now,
        jitter: 0.5,
      });
      expect(last.jobState).toBe('failed');
      expect((await stageOf(j.id, 'slow')).endReason).toBe('timeout after 2 s; not retried because the job is failing');
      const after = await store.jobGet({ jobId: j.id });
      expect(after!.failureReason).toBe('stage exit5 failed: exit code 5; not retryable');
      const ended = (await store.eventsList({ jobId: j.id, limit: 100 })).find((e) => e.type === 'job:failed');
      expect(ended?.message).toBe('job failed: stage exit5 failed: exit code 5; not retryable');
    });

    it('cancel wins: stages and active attempts canceled, the machine is told, nothing can start', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 5, now, leaseMs: LEASE });
      const r = await store.jobCancel({ jobId: j.id, now, reason: 'canceled by user' });
      expect(r.changed).toBe(true);
      expect(r.job.state).toBe('canceled');
      const hb = await heartbeat(m.id, [{ attemptId: a.id, token: a.token }]);
      expect(hb.kill).toEqual([{ attemptId: a.id, reason: 'attempt is canceled: canceled by user' }]);
      expect((await store.schedulerSnapshot({ now, limitPerShape: 10 })).queue).toEqual([]);
      const again = await store.jobCancel({ jobId: j.id, now, reason: 'again' });
      expect(again.changed).toBe(false);
    });

    it("a heartbeat's progress message is kept with the stage's secretEnv values masked, as its log is", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const secret = 'sk-live-5f2e9c1a7b';
      const j = await store.jobSubmit({ definition: job([stage('a', { secretEnv: { API_KEY: secret, SHORT: 'on' } })]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 5, now, leaseMs: LEASE });
      const running = [{ attemptId: a.id, token: a.token, progress: { fraction: 0.5, message: `key=${secret} mode=on` } }];
      await store.machineHeartbeat({ machineId: m.id, running, now, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0 });
      // Under 4 characters a value is left, as in the log (maskSecrets).
      expect((await stageOf(j.id, 'a')).attempts[0]!.progress).toMatchObject({ fraction: 0.5, message: 'key=*** mode=on' });
      expect((await store.attemptsHeld()).find((h) => h.id === a.id)?.progress?.message).toBe('key=*** mode=on');
    });

    it('heartbeats renew leases; an expired lease loses the attempt and re-queues the stage without using a retry', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 5, now, leaseMs: LEASE });
      now += 8000;
      await heartbeat(m.id, [{ attemptId: a.id, token: a.token }]);
      now += 8000;
      expect((await store.attemptsReap({ now, ackTimeoutMs: 30_000, jitter: 0 })).lostAttempts).toEqual([]);
      now += 3000;
      expect((await store.attemptsReap({ now, ackTimeoutMs: 30_000, jitter: 0 })).lostAttempts).toEqual([a.id]);
      const s = await stageOf(j.id, 'a');
      expect(s.state).toBe('ready');
      expect(s.attemptsUsed).toBe(0);
      expect(s.lostUsed).toBe(1);
      expect(s.currentAttemptId).toBeNull();
      await expect(
        store.attemptComplete({
          attemptId: a.id,
          token: a.token,
          exitCode: 0,
          signal: null,
          end: { kind: 'exited' as const, detail: null },
          outputs: [],
          now,
          jitter: 0,
        }),
      ).rejects.toBeInstanceOf(StaleAttemptError);
    });

    it('a silent machine becomes suspect, then lost with its attempts; a heartbeat brings it back', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 5, now, leaseMs: 60_000 });
      now += 5000;
      let r = await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0 });
      expect(r.machines).toEqual([{ machineId: m.id, from: 'ready', to: 'suspect' }]);
      now += 6000;
      r = await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0 });
      expect(r.machines[0]!.to).toBe('lost');
      expect(r.lostAttempts).toEqual([a.id]);
      expect((await stageOf(j.id, 'a')).state).toBe('ready');
      const hb = await heartbeat(m.id, [{ attemptId: a.id, token: a.token }]);
      expect(hb.health).toBe('ready');
      expect(hb.kill[0]!.reason).toMatch(/lost/);
    });

    it('a machine heard from but not yet written is not judged silent; one heard from too long ago is', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 5, now, leaseMs: 60_000 });
      const registered = now;
      now += 11_000;
      // Its row says 11 s of silence; the replica heard it 1 s ago (the liveness loop has not written that yet).
      let r = await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0, heard: (id) => (id === m.id ? now - 1000 : undefined) });
      expect(r).toEqual({ machines: [], lostAttempts: [] });
      // An arrival held but older than the row's time changes nothing: judged by the row.
      r = await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0, heard: () => registered - 1000 });
      expect(r.machines).toEqual([{ machineId: m.id, from: 'ready', to: 'lost' }]);
      expect(r.lostAttempts).toEqual([a.id]);
    });

    it('a machine heard from 6 s ago is judged suspect by that, not lost by its row', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      now += 11_000;
      const r = await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0, heard: () => now - 6000 });
      expect(r.machines).toEqual([{ machineId: m.id, from: 'ready', to: 'suspect' }]);
    });

    it('an assignment not acknowledged in time is lost and the stage re-queued', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      expect((await store.machineAssignments({ machineId: m.id })).map((x) => x.attemptId)).toEqual([a.id]);
      expect(await store.machineAssignments({ machineId: m.id, exclude: [a.id] })).toEqual([]);
      now += 31_000;
      const r = await store.attemptsReap({ now, ackTimeoutMs: 30_000, jitter: 0 });
      expect(r.lostAttempts).toEqual([a.id]);
      expect(await store.machineAssignments({ machineId: m.id })).toEqual([]);
      expect((await stageOf(j.id, 'a')).state).toBe('ready');
    });

    it('the infrastructure budget bounds lost attempts', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const retry = { maxAttempts: 3, backoff: { initialSeconds: 1, maxSeconds: 1 }, onExitCodes: null, maxLost: 1 };
      const j = await store.jobSubmit({ definition: job([stage('a', { retry })]), source: null, now });
      for (let i = 0; i < 2; i++) {
        await place(j.id, 'a', m.id);
        now += 31_000;
        await store.attemptsReap({ now, ackTimeoutMs: 30_000, jitter: 0 });
      }
      const s = await stageOf(j.id, 'a');
      expect(s.state).toBe('failed');
      expect(s.endReason).toMatch(/infrastructure budget of 1/);
    });

    it('stores and serves logs of the latest attempt, token-checked', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      const marks = await store.attemptLogAppend({
        attemptId: a.id,
        token: a.token,
        chunks: [piece('stdout', 0, 'hello\n'), piece('stderr', 0, 'warn\n')],
        now,
      });
      expect(marks).toEqual({ stdout: 6, stderr: 5, capped: false });
      await expect(store.attemptLogAppend({ attemptId: a.id, token: 99, chunks: [piece('stdout', 6, 'x')], now })).rejects.toBeInstanceOf(StaleAttemptError);
      const logs = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 });
      expect(logs!.map((l) => l.data).join('')).toBe('hello\nwarn\n');
      expect(await store.stageLogs({ jobId: j.id, stage: 'nope', limit: 100 })).toBeNull();
      // Pages: `limit` chunks at a time, the last id as the cursor.
      const first = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 1 });
      expect(first!.map((l) => l.data)).toEqual(['hello\n']);
      const next = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 1, afterId: first![0]!.id });
      expect(next!.map((l) => l.data)).toEqual(['warn\n']);
    });

    it('stores each byte of a log once: resends are ignored, gaps wait, the marks say where to go on', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      const send = (...chunks: LogPiece[]) => store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks, now });
      expect(await send()).toEqual({ stdout: 0, stderr: 0, capped: false });
      expect(await send(piece('stdout', 0, 'one\n'), piece('stdout', 4, 'two\n'))).toEqual({ stdout: 8, stderr: 0, capped: false });
      // The same pieces again (an answer lost on the way back), then one of them with the next: only the next is new.
      expect(await send(piece('stdout', 0, 'one\n'), piece('stdout', 4, 'two\n'))).toEqual({ stdout: 8, stderr: 0, capped: false });
      expect(await send(piece('stdout', 4, 'two\n'), piece('stdout', 8, 'three\n'))).toEqual({ stdout: 14, stderr: 0, capped: false });
      // A gap (offset past the mark) is not taken, nor what follows it in that stream; the other stream goes on.
      expect(await send(piece('stdout', 20, 'later\n'), piece('stdout', 26, 'more\n'), piece('stderr', 0, 'err\n'))).toEqual({
        stdout: 14,
        stderr: 4,
        capped: false,
      });
      // Bytes that are not valid UTF-8 count as the file had them, not as their decoding.
      expect(await send({ stream: 'stdout', offset: 14, bytes: 2, data: '\ufffd\ufffd' })).toEqual({ stdout: 16, stderr: 4, capped: false });
      const logs = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 });
      expect(logs!.map((l) => l.data).join('')).toBe('one\ntwo\nthree\nerr\n\ufffd\ufffd');
    });

    it('says in the log what an outcome reports was written but never shipped', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks: [piece('stdout', 0, 'one\n')], now });
      await exited(a, 0, { stdout: 104, stderr: 0 });
      const logs = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 });
      expect(logs!.map((l) => l.data).join('')).toBe("one\n\n[gantry: the last 100 bytes of stdout were not shipped; the machine's log file has them]\n");
    });

    it('past the head keeps the tail shipped at the end, marks the cut where it was, once, and counts it', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      const caps = { headBytes: 100, tailBytes: 40 };
      const send = (...chunks: LogPiece[]) => store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks, now, caps });
      const line = (i: number) => `line ${String(i).padStart(3, '0')} of the run`.padEnd(29, '.') + '\n'; // 30 bytes
      expect(await send(piece('stdout', 0, line(0)), piece('stdout', 30, line(1)))).toEqual({ stdout: 60, stderr: 0, capped: false });
      // A tail piece past the mark before the head is full is a gap, not a cut.
      expect(await send({ ...piece('stdout', 90, line(3)), tail: true })).toEqual({ stdout: 60, stderr: 0, capped: false });
      // The piece that fills the head is taken whole; what follows it while the process runs is not.
      expect(await send(piece('stdout', 60, line(2)), piece('stdout', 90, line(3)), piece('stdout', 120, line(4)))).toEqual({
        stdout: 120,
        stderr: 0,
        capped: true,
        tailBytes: 40,
      });
      expect(await send(piece('stdout', 120, line(4)))).toEqual({ stdout: 120, stderr: 0, capped: true, tailBytes: 40 });
      expect((await store.attemptGet({ attemptId: a.id }))!.logCutBytes).toBe(0);
      // The process ended at 330 bytes: its last 30 come as the tail, twice (the first answer lost), and stderr's whole 10.
      const tail = [
        { ...piece('stdout', 300, line(10)), tail: true },
        { ...piece('stderr', 0, 'fatal: no\n'), tail: true },
      ];
      expect(await send(...tail)).toEqual({ stdout: 330, stderr: 10, capped: true, tailBytes: 40 });
      expect(await send(...tail)).toEqual({ stdout: 330, stderr: 10, capped: true, tailBytes: 40 });
      const logs = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 });
      expect(logs!.map((l) => l.data).join('')).toBe(
        `${line(0)}${line(1)}${line(2)}${line(3)}\n[gantry: 180 B of stdout cut here (its bytes 120 to 300); the head above and the tail below are kept]\n${line(10)}fatal: no\n`,
      );
      expect((await store.attemptGet({ attemptId: a.id }))!.logCutBytes).toBe(180);
      const cuts = (await store.eventsList({ jobId: j.id, limit: 100 })).filter((e) => e.type === 'attempt:log-cut');
      expect(cuts.map((e) => e.data)).toEqual([{ stream: 'stdout', fromByte: 120, toByte: 300, bytes: 180 }]);
      expect(cuts[0]!.message).toMatch(/^stage a attempt 1 log cut: 180 B of stdout dropped/);
      // The outcome comes after the whole log: nothing is missing, and its event says the log was cut.
      await exited(a, 1, { stdout: 330, stderr: 10 });
      const failed = (await store.eventsList({ jobId: j.id, limit: 100 })).find((e) => e.type === 'attempt:failed');
      expect(failed!.data).toMatchObject({ logCutBytes: 180 });
      expect((await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 }))!.length).toBe(logs!.length);
    });

    it('past the head, an end never shipped (an agent from before tails) is counted as cut at the end', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      const caps = { headBytes: 10, tailBytes: 10 };
      expect(await store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks: [piece('stdout', 0, 'x'.repeat(12))], now, caps })).toMatchObject({
        capped: true,
      });
      await exited(a, 0, { stdout: 1012, stderr: 0 });
      const logs = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 });
      expect(logs!.map((l) => l.data).join('')).toBe(
        `${'x'.repeat(12)}\n[gantry: 1000 B of stdout cut here (its bytes 12 to 1012); the head above is kept, its end was not shipped]\n`,
      );
      expect((await store.attemptGet({ attemptId: a.id }))!.logCutBytes).toBe(1000);
      const events = await store.eventsList({ jobId: j.id, limit: 100 });
      expect(events.filter((e) => e.type === 'attempt:log-cut').map((e) => e.data.bytes)).toEqual([1000]);
      expect(events.find((e) => e.type === 'attempt:succeeded')!.data).toMatchObject({ logCutBytes: 1000 });
    });

    it('past the head, an outcome without the sizes of its files (an agent from before tails) ends the log saying it stops there', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptLogAppend({
        attemptId: a.id,
        token: a.token,
        chunks: [piece('stdout', 0, 'x'.repeat(12))],
        now,
        caps: { headBytes: 10, tailBytes: 10 },
      });
      await store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      const logs = await store.stageLogs({ jobId: j.id, stage: 'a', limit: 100 });
      expect(logs!.map((l) => l.data).join('')).toBe(
        `${'x'.repeat(12)}\n[gantry: log truncated past its head (12 B); its agent ships no tail, and did not say how much it wrote]\n`,
      );
    });

    it('stores nothing past the head, the tail and the slack, whatever an agent ships, and says where it stopped', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      const caps = { headBytes: 1024, tailBytes: 1024 };
      const mib = 'x'.repeat(2 ** 20);
      let marks = await store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks: [piece('stdout', 0, mib)], now, caps });
      // A rogue agent ships its whole file as the tail: its bytes are taken (it moves on), only not stored past the hard cap.
      for (let i = 1; i < 5; i++)
        marks = await store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks: [{ ...piece('stdout', i * 2 ** 20, mib), tail: true }], now, caps });
      expect(marks).toEqual({ stdout: 5 * 2 ** 20, stderr: 0, capped: true, tailBytes: 1024 });
      let total = 0;
      let last = '';
      for (let after: number | undefined; ;) {
        const page = (await store.stageLogs({ jobId: j.id, stage: 'a', limit: 10, afterId: after }))!;
        if (page.length === 0) break;
        for (const c of page) total += Buffer.byteLength(c.data);
        last = page.at(-1)!.data;
        after = page.at(-1)!.id;
      }
      const hard = 2048 + 2 * 2 ** 20;
      expect(total).toBeLessThan(hard + 100);
      expect(total).toBeGreaterThanOrEqual(hard);
      expect(last).toMatch(/log truncated at 2\.0 MiB\]\n$/);
    });

    it('re-registering by name keeps the machine id', async () => {
      const m1 = await store.machineRegister({ ...cpuMachine('same'), now });
      const m2 = await store.machineRegister({ ...cpuMachine('same', { cpuMillis: 4000 }), now: now + 1 });
      expect(m2.id).toBe(m1.id);
      expect(m2.cpuMillis).toBe(4000);
      expect((await store.machineList()).length).toBe(1);
    });

    it('a canceled attempt holds its GPUs until its agent stops reporting it', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 1), now });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['h100'] } };
      const j1 = await store.jobSubmit({ definition: job([stage('a', { resources: gpu })]), source: null, now });
      const j2 = await store.jobSubmit({ definition: job([stage('b', { resources: gpu })]), source: null, now });
      const a = (await place(j1.id, 'a', m.id, [0])).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 9, now, leaseMs: LEASE });
      await store.jobCancel({ jobId: j1.id, now, reason: 'test' });
      // The process is still in its kill grace: the agent still lists it.
      await heartbeat(m.id, [{ attemptId: a.id, token: a.token }]);
      expect((await store.schedulerSnapshot({ now, limitPerShape: 10 })).machines[0]!.gpus[0]!.free).toBe(false);
      expect((await place(j2.id, 'b', m.id, [0])).applied).toHaveLength(0);
      // Gone: released, and the device can be placed again.
      await heartbeat(m.id, []);
      expect((await store.schedulerSnapshot({ now, limitPerShape: 10 })).machines[0]!.gpus[0]!.free).toBe(true);
      expect((await place(j2.id, 'b', m.id, [0])).applied).toHaveLength(1);
    });

    it('teams: made, changed, listed; usage is what their unreleased attempts hold', async () => {
      const made = await store.teamPut({ name: 'vision', weight: 2, quota: { gpus: { h100: 4 } }, create: true, now });
      expect(made).toMatchObject({ created: true, changed: true, team: { name: 'vision', weight: 2, quota: { gpus: { h100: 4 } } } });
      expect((await store.teamPut({ name: 'vision', weight: 2, create: false, now })).changed).toBe(false);
      await expect(store.teamPut({ name: 'nobody', weight: 3, create: false, now })).rejects.toThrow(/team nobody not found/);
      const changed = await store.teamPut({ name: 'vision', quota: { cpuMillis: 8000 }, create: false, now });
      expect(changed.team).toMatchObject({ weight: 2, quota: { cpuMillis: 8000 } });
      const m = await store.machineRegister({ ...gpuMachine('g1', 2), now });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['h100'] } };
      const j = await store.jobSubmit({ definition: job([stage('a', { resources: gpu })], { team: 'vision' }), source: null, now });
      await place(j.id, 'a', m.id, [1]);
      const teams = await store.schedulerTeams({ usage: true });
      expect(teams.find((t) => t.name === 'vision')).toMatchObject({ weight: 2, usage: { cpuMillis: 1000, memoryBytes: 2 ** 20, gpus: { h100: 1 } } });
      expect((await store.schedulerTeams({ usage: false })).find((t) => t.name === 'vision')!.usage.gpus).toEqual({});
      expect((await store.teamList()).map((t) => t.name)).toContain('vision');
    });

    it('preemption: the victim is preempted, its stage requeued after its grace without using a retry, its agent told to kill it with that grace', async () => {
      const m = await store.machineRegister({ ...gpuMachine('g1', 1), now });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['h100'] } };
      const low = await store.jobSubmit({
        definition: job([stage('train', { resources: gpu, preemptible: true, preemptionGraceSeconds: 7 })], { priority: 10 }),
        source: null,
        now,
      });
      const firm = await store.jobSubmit({ definition: job([stage('keep', { resources: { ...gpu, gpu: null } })], { priority: 10 }), source: null, now });
      const a = (await place(low.id, 'train', m.id, [0])).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 9, now, leaseMs: LEASE });
      const k = (await place(firm.id, 'keep', m.id)).applied[0]!;
      const view = await store.preemptionView();
      // Only the preemptible attempt is a possible victim; the other is neither preemptible nor leaving.
      expect(view.map((v) => v.attemptId)).toEqual([a.id]);
      expect(view[0]).toMatchObject({
        team: 'default',
        priority: 10,
        preemptible: true,
        gpuIndices: [0],
        gpuType: 'h100',
        leaving: false,
        stagePreemptedAt: null,
      });
      const stageId = (await stageOf(low.id, 'train')).id;
      const r = await store.planApply({
        plan: {
          placements: [],
          pending: [],
          preemptions: [{ stageId: 'stg-x', machineId: m.id, victims: [{ attemptId: a.id, token: a.token, stageId }], reason: 'preempted for a test' }],
        },
        now,
        leaseMs: LEASE,
      });
      expect(r.preempted).toEqual([a.id]);
      const s = await stageOf(low.id, 'train');
      expect(s).toMatchObject({ state: 'ready', attemptsUsed: 0, notBefore: now + 7000 });
      expect(s.attempts[0]).toMatchObject({ state: 'preempted', reason: 'preempted for a test' });
      // Still held until its agent stops listing it; the kill carries the stage's grace.
      const hb = await heartbeat(m.id, [
        { attemptId: a.id, token: a.token },
        { attemptId: k.id, token: k.token },
      ]);
      expect(hb.kill).toEqual([{ attemptId: a.id, reason: 'attempt is preempted: preempted for a test', graceMs: 7000 }]);
      expect((await store.preemptionView()).map((v) => [v.attemptId, v.leaving])).toEqual([[a.id, true]]);
      // A victim the plan names again (or with a stale token) is not preempted twice.
      const again = await store.planApply({
        plan: {
          placements: [],
          pending: [],
          preemptions: [{ stageId: 'stg-x', machineId: m.id, victims: [{ attemptId: a.id, token: a.token, stageId }], reason: 'again' }],
        },
        now,
        leaseMs: LEASE,
      });
      expect(again.preempted).toBeUndefined();
      // A non-preemptible attempt is never preempted, whatever a plan says.
      const refused = await store.planApply({
        plan: {
          placements: [],
          pending: [],
          preemptions: [{ stageId: 'stg-x', machineId: m.id, victims: [{ attemptId: k.id, token: k.token, stageId: 'x' }], reason: 'no' }],
        },
        now,
        leaseMs: LEASE,
      });
      expect(refused.preempted).toBeUndefined();
      await heartbeat(m.id, [{ attemptId: k.id, token: k.token }]);
      expect(await store.preemptionView()).toEqual([]);
    });

    it('a heartbeat soon after the last one written, calling for nothing, writes nothing', async () => {
      const m = await store.machineRegister({ ...cpuMachine('m1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
      const soon = (running: { attemptId: string; token: number }[], at: number) =>
        store.machineHeartbeat({ machineId: m.id, running, now: at, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0, renewAfterMs: 1000 });
      const lease0 = (await stageOf(j.id, 'a')).attempts[0]!.leaseExpiresAt;
      await soon([{ attemptId: a.id, token: a.token }], now + 500);
      expect((await store.machineGet({ machineId: m.id }))!.lastHeartbeatAt).toBe(now);
      expect((await stageOf(j.id, 'a')).attempts[0]!.leaseExpiresAt).toBe(lease0);
      // Past the interval it is written, and renews.
      await soon([{ attemptId: a.id, token: a.token }], now + 1500);
      expect((await store.machineGet({ machineId: m.id }))!.lastHeartbeatAt).toBe(now + 1500);
      expect((await stageOf(j.id, 'a')).attempts[0]!.leaseExpiresAt).toBe(now + 1500 + LEASE);
      // A re-registration counts as a sign of life but renews no lease: the next heartbeat does.
      await store.machineRegister({ ...cpuMachine('m1'), now: now + 9000 });
      await soon([{ attemptId: a.id, token: a.token }], now + 9100);
      expect((await stageOf(j.id, 'a')).attempts[0]!.leaseExpiresAt).toBe(now + 9100 + LEASE);
      // A canceled attempt the agent stopped listing is released at once, however soon.
      const b = (await place(j.id, 'b', m.id)).applied[0]!;
      // What is placed there and not started comes with the heartbeat's answer (the running one does not).
      expect((await soon([{ attemptId: a.id, token: a.token }], now + 9150)).placed).toEqual([b.id]);
      await store.jobCancel({ jobId: j.id, now: now + 9200, reason: 'test' });
      await soon([], now + 9300);
      expect((await store.machineGet({ machineId: m.id }))!.allocated.attempts).toBe(0);
      expect(b.id).toBeTruthy();
    });

    it('heartbeats kept in memory: machinesSeen writes each machine its own time, never an earlier one; livenessAfterMs leaves the row to it', async () => {
      const [m1, m2, m3] = [
        await store.machineRegister({ ...cpuMachine('s1'), now }),
        await store.machineRegister({ ...cpuMachine('s2'), now }),
        await store.machineRegister({ ...cpuMachine('s3'), now }),
      ];
      const idle = (machineId: string, at: number) =>
        store.machineHeartbeat({ machineId, running: [], now: at, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0, renewAfterMs: 1000, livenessAfterMs: 3000 });
      const seenAt = async (id: string) => (await store.machineGet({ machineId: id }))!.lastHeartbeatAt;
      // Past renewAfterMs, within livenessAfterMs: not written, the caller keeps it.
      expect((await idle(m1.id, now + 2000)).placed).toEqual([]);
      expect(await seenAt(m1.id)).toBe(now);
      // Past livenessAfterMs: written here (the caller's flush lagging must not make it look dead).
      await idle(m1.id, now + 3500);
      expect(await seenAt(m1.id)).toBe(now + 3500);
      // Each its own time; an earlier time than the row's changes nothing; an unknown id is ignored.
      const moved = await store.machinesSeen({
        seen: [
          { machineId: m1.id, at: now + 3000 },
          { machineId: m2.id, at: now + 2100 },
          { machineId: m3.id, at: now + 2200 },
          { machineId: 'm-none', at: now + 2300 },
        ],
        now: now + 4000,
      });
      expect(moved).toBe(2);
      expect([await seenAt(m1.id), await seenAt(m2.id), await seenAt(m3.id)]).toEqual([now + 3500, now + 2100, now + 2200]);
      // Many at once (more than one statement's worth).
      const many = Array.from({ length: 2500 }, (_, i) => ({ machineId: i % 2 ? m2.id : m3.id, at: now + 5000 + i }));
      await store.machinesSeen({ seen: many, now: now + 9000 });
      expect([await seenAt(m2.id), await seenAt(m3.id)]).toEqual([now + 7499, now + 7498]);
      // A suspect machine's heartbeat is written at once, whatever livenessAfterMs says.
      await store.machinesReap({ now: now + 7498 + 6000, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0 });
      expect((await store.machineGet({ machineId: m3.id }))!.health).toBe('suspect');
      await idle(m3.id, now + 7498 + 6100);
      expect(await store.machineGet({ machineId: m3.id })).toMatchObject({ health: 'ready', lastHeartbeatAt: now + 7498 + 6100 });
    });

    it('a running attempt its agent stops reporting is lost, once the list is older than its start by the grace', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (await place(j.id, 'a', m.id)).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 9, now, leaseMs: LEASE });
      now += 3000;
      expect((await heartbeat(m.id, [])).lost).toEqual([]);
      now += 2000;
      expect((await heartbeat(m.id, [])).lost).toEqual([a.id]);
      const s = await stageOf(j.id, 'a');
      expect([s.state, s.lostUsed, s.attemptsUsed]).toEqual(['ready', 1, 0]);
    });

    it('repair leaves consistent jobs as they are and only looks at stale ones', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
      await runToEnd(j.id, 'a', m.id);
      expect(await store.jobsRepair({ now, staleAfterMs: 1000, limit: 10 })).toEqual({ moved: [], next: null });
      now += 5000;
      expect(await store.jobsRepair({ now, staleAfterMs: 1000, limit: 10 })).toEqual({ moved: [], next: null });
      expect((await stageOf(j.id, 'b')).state).toBe('ready');
    });

    it('repair walks the jobs a window at a time, whatever the backlog, and starts over at the end', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push((await store.jobSubmit({ definition: job([stage('a')], { name: `j${i}` }), source: null, now })).id);
      ids.sort();
      const seen: (string | null)[] = [];
      let after: string | null = null;
      for (let i = 0; i < 3; i++) {
        const r = await store.jobsRepair({ now: now + 60_000, staleAfterMs: 1000, limit: 10, after, scan: 2 });
        expect(r.moved).toEqual([]);
        seen.push(r.next);
        after = r.next;
      }
      expect(seen).toEqual([ids[1], ids[3], null]);
    });

    it("queues by shape: each shape's head is read on its own, in order, however many of another shape wait", async () => {
      await store.machineRegister({ ...cpuMachine('c1'), now });
      const nowhere = Array.from({ length: 30 }, (_, i) => stage(`x${i}`, { placement: { region: 'nowhere', labels: {} } }));
      const blocked = await store.jobSubmit({ definition: job(nowhere), source: null, now });
      now += 1;
      const fine = await store.jobSubmit({ definition: job([stage('ok'), stage('later', { needs: ['ok'] })]), source: null, now });
      const shapes = await store.readyShapes({ now });
      expect(shapes).toHaveLength(2);
      const far = shapes.find((x) => x.placement.region === 'nowhere')!;
      const near = shapes.find((x) => x.placement.region === null)!;
      expect(near.resources.cpuMillis).toBe(1000);
      const heads = await store.queueHeads({
        now,
        shapes: [
          { shape: far.shape, limit: 5 },
          { shape: near.shape, limit: 5 },
        ],
      });
      expect(heads.map((h) => h.stageName)).toEqual(['x0', 'x1', 'x2', 'x3', 'x4', 'ok']);
      expect(await store.queueHeads({ now, shapes: [{ shape: far.shape, limit: 0 }] })).toEqual([]);
      await place(fine.id, 'ok', (await store.clusterView()).machines[0]!.id);
      expect((await store.readyShapes({ now })).map((x) => x.shape)).toEqual([far.shape]);
      expect((await stageOf(blocked.id, 'x0')).state).toBe('ready');
    });

    it('expires ended jobs past retention with all their rows, keeping the rest', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const old = await store.jobSubmit({ definition: job([stage('a')], { name: 'old' }), source: null, now });
      const r = await runToEnd(old.id, 'a', m.id);
      await store.attemptLogAppend({ attemptId: r.attempt.id, token: r.attempt.token, chunks: [piece('stdout', 0, 'x')], now });
      const running = await store.jobSubmit({ definition: job([stage('b')], { name: 'running' }), source: null, now });
      now += 10_000;
      const recent = await store.jobSubmit({ definition: job([stage('c')], { name: 'recent' }), source: null, now });
      await runToEnd(recent.id, 'c', m.id);
      const out = await store.jobsExpire({ finishedBefore: now - 5000, limit: 10 });
      expect(out).toEqual({ jobs: [old.id], attempts: [r.attempt.id], legacyDirs: [r.attempt.id] });
      expect(await store.jobGet({ jobId: old.id })).toBeNull();
      expect(await store.eventsList({ jobId: old.id, limit: 10 })).toEqual([]);
      expect(await store.attemptGet({ attemptId: r.attempt.id })).toBeNull();
      expect((await store.jobList({ limit: 10 })).map((j) => j.name).sort()).toEqual(['recent', 'running']);
      expect(await store.jobsExpire({ finishedBefore: now - 5000, limit: 10 })).toEqual({ jobs: [], attempts: [], legacyDirs: [] });
      // A canceled job whose process is still being killed stays until its agent lets go of it.
      const b = (await place(running.id, 'b', m.id)).applied[0]!;
      await store.jobCancel({ jobId: running.id, now, reason: 'test' });
      now += 10_000;
      await heartbeat(m.id, [{ attemptId: b.id, token: b.token }]);
      expect((await store.jobsExpire({ finishedBefore: now, limit: 10 })).jobs).toEqual([recent.id]);
      await heartbeat(m.id, []);
      expect((await store.jobsExpire({ finishedBefore: now, limit: 10 })).jobs).toEqual([running.id]);
    });

    it('the outbox relays in order and marks what was published', async () => {
      await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const pending = await store.outboxPending({ limit: 100 });
      expect(pending.length).toBeGreaterThan(0);
      const ids = pending.map((p) => p.id);
      expect([...ids].sort((x, y) => x - y)).toEqual(ids);
      // Only rows written before a time: none written at `now` is before `now`.
      expect(await store.outboxPending({ limit: 100, createdBefore: now })).toEqual([]);
      expect((await store.outboxPending({ limit: 100, createdBefore: now + 1 })).map((p) => p.id)).toEqual(ids);
      await store.outboxMarkPublished({ ids, now });
      expect(await store.outboxPending({ limit: 100 })).toEqual([]);
      expect(await store.outboxPrune({ before: now })).toBe(0);
      expect(await store.outboxPrune({ before: now + 1 })).toBe(new Set(ids).size);
    });

    it("a transaction's messages are one outbox row: read back as that row's messages, in order, marked and pruned as one", async () => {
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] } };
      // Stages ready in two pools: two messages from one transaction.
      await store.jobSubmit({ definition: job([stage('a'), stage('g', { resources: gpu })]), source: null, now });
      const pending = await store.outboxPending({ limit: 100 });
      expect(pending.map((m) => [m.topic, m.part])).toEqual([
        ['pool:ready', 0],
        ['pool:ready', 1],
      ]);
      expect(new Set(pending.map((m) => m.payload)).size).toBe(2);
      expect(new Set(pending.map((m) => m.id)).size).toBe(1);
      // `limit` counts rows: the row's messages come whole.
      expect(await store.outboxPending({ limit: 1 })).toEqual(pending);
      // A transaction of one message keeps a row of its own, as before batches (no part).
      await store.jobSubmit({ definition: job([stage('a')], { name: 'one' }), source: null, now });
      const one = (await store.outboxPending({ limit: 100 })).slice(2);
      expect(one.map((m) => [m.topic, m.part])).toEqual([['pool:ready', undefined]]);
      await store.outboxMarkPublished({ ids: [pending[0]!.id, one[0]!.id], now });
      expect(await store.outboxPending({ limit: 100 })).toEqual([]);
      expect(await store.outboxPrune({ before: now + 1 })).toBe(2);
    });

    machineSchedulingConformance(() => store);
    heartbeatPeriodConformance(() => store);
    rerunConformance(() => store);
    tokenConformance(() => store);
    auditConformance(() => store);
    dashboardConformance(() => store);
    attemptEndConformance(() => store);
    containmentConformance(() => store);
    outputLimitsConformance(() => store);
    gpuShareConformance(() => store);
    autoscaleConformance(() => store);
    gangConformance(() => store);
    gangPortConformance(() => store);
    gangOutputsConformance(() => store);
    gangPreemptionConformance(() => store);
    gangHeldUntilConformance(() => store);
    startOnPlacementConformance(() => store);
  });
}
