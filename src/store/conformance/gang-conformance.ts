import { beforeEach, describe, expect, it } from 'vitest';
import { StaleAttemptError } from '../../domain/errors.js';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import type { AttemptRecord } from '../records.js';
import type { Store } from '../store.js';
import { blobKey, gangPlacement as placeGang, gpuMachine, job, stage } from './fixtures.js';

/**
 * Gangs in the store (issue 31, docs/gangs.md "Gangs in the store"), as every adapter must keep
 * them: a gang's placement applied whole (a row per member) or not at all, each member's room held
 * on its machine, one attempt for the whole gang (a member failing or lost ends the others and the
 * stage is charged once), success only when every member succeeded, with rank 0's outputs, and a
 * cancel that ends every member. Run inside storeConformance, whose hooks open a fresh store for
 * each test and close it.
 */
export function gangConformance(storeOf: () => Store): void {
  describe('gangs', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    const MEMBER = { cpuMillis: 4000, memoryBytes: 2 ** 30 };
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    /** Three machines of 2 h100 each, and a job whose stage `train` is a gang of 3 × 2 GPUs. */
    const setUp = async () => {
      const ms = [];
      // g1's agent says which host it runs on: the rendezvous's address when g1 holds rank 0.
      for (const name of ['g1', 'g2', 'g3'])
        ms.push(
          await store.machineRegister({ ...gpuMachine(name, 2, 'h100', name === 'g1' ? { agent: { version: 'test', host: 'node-a.cluster' } } : {}), now }),
        );
      const j = await store.jobSubmit({
        definition: job([stage('train', { resources: { ...MEMBER, gpu: { count: 2, types: ['h100'] }, machines: 3 } })]),
        source: null,
        now,
      });
      return { machines: ms.map((m) => m.id), jobId: j.id, stageId: j.stages[0]!.id };
    };
    /** The planner's placement of the gang: rank r on machine r, both GPUs. */
    const gangPlacement = (stageId: string, machines: string[]) => placeGang(stageId, machines, MEMBER);
    const apply = (placements: PlannedPlacement[]) => store.planApply({ plan: { placements, pending: [] }, now, leaseMs: LEASE });
    const stageOf = async (jobId: string) => (await store.jobGet({ jobId }))!.stages[0]!;
    const attemptOf = async (id: string) => (await store.attemptGet({ attemptId: id }))!;
    const eventsOf = async (type: string) => (await store.eventsList({ limit: 1000 })).filter((e) => e.type === type);
    const exited = (a: { id: string; token: number }, exitCode: number, outputs: { path: string; size: number }[] = []) =>
      store.attemptComplete({ attemptId: a.id, token: a.token, exitCode, signal: null, end: { kind: 'exited', detail: null }, outputs, now, jitter: 0 });
    /** The gang placed and every member started: its members, by rank. */
    const running = async () => {
      const s = await setUp();
      const members = (await apply([gangPlacement(s.stageId, s.machines)])).applied;
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 100, now, leaseMs: LEASE });
      return { ...s, members };
    };
    /** A machine's heartbeat listing `running` (none: its agent runs nothing, so what ended is released). */
    const heartbeat = (machineId: string, running: readonly { id: string; token: number }[] = []) =>
      store.machineHeartbeat({
        machineId,
        running: running.map((a) => ({ attemptId: a.id, token: a.token })),
        now,
        leaseMs: LEASE,
        missingAfterMs: 4000,
        jitter: 0,
      });
    const freeGpus = async () => {
      const view = await store.clusterView();
      return Object.fromEntries(view.machines.map((m) => [m.name, m.gpus.filter((g) => g.free).length]));
    };

    it('applies a gang as one attempt row per member: one number, own tokens, linked by rank 0, each holding its room', async () => {
      const { machines, jobId, stageId } = await setUp();
      const r = await apply([gangPlacement(stageId, machines)]);
      expect(r.skipped).toEqual([]);
      const rank0 = r.applied[0]!;
      expect(r.applied.map((a) => [a.machineName, a.number, a.gpuIndices, a.cpuMillis, a.state, a.gang])).toEqual([
        ['g1', 1, [0, 1], 4000, 'scheduled', { id: rank0.id, rank: 0, size: 3 }],
        ['g2', 1, [0, 1], 4000, 'scheduled', { id: rank0.id, rank: 1, size: 3 }],
        ['g3', 1, [0, 1], 4000, 'scheduled', { id: rank0.id, rank: 2, size: 3 }],
      ]);
      // Each member is fenced on its own token; the stage's grew past them all.
      expect(new Set(r.applied.map((a) => a.token)).size).toBe(3);
      const s = await stageOf(jobId);
      expect(s.state).toBe('scheduled');
      expect(s.currentAttemptId).toBe(rank0.id);
      expect(s.token).toBe(Math.max(...r.applied.map((a) => a.token)));
      expect(s.attempts).toHaveLength(3);
      // Every member's GPUs are held on its own machine.
      expect(await freeGpus()).toEqual({ g1: 0, g2: 0, g3: 0 });
      expect((await eventsOf('attempt:scheduled')).map((e) => e.message)).toEqual([
        'stage train attempt 1 rank 0 of 3 placed on g1 with h100 GPU(s) 0,1',
        'stage train attempt 1 rank 1 of 3 placed on g2 with h100 GPU(s) 0,1',
        'stage train attempt 1 rank 2 of 3 placed on g3 with h100 GPU(s) 0,1',
      ]);
      // Each member's agent is handed its own assignment, with its rank and where rank 0 listens:
      // rank 0's host (its agent advertised no address), at the port reserved there: the lowest of the default range.
      const handed = [];
      for (const m of machines) handed.push(...(await store.machineAssignments({ machineId: m })));
      expect(handed.map((x) => x.attemptId)).toEqual(r.applied.map((a) => a.id));
      expect(handed.map((x) => x.gang)).toEqual([0, 1, 2].map((rank) => ({ rank, size: 3, masterAddr: 'node-a.cluster', masterPort: 29500 })));
      // The stage runs once any member does.
      await store.attemptStart({ attemptId: r.applied[2]!.id, token: r.applied[2]!.token, pid: 9, now, leaseMs: LEASE });
      expect((await stageOf(jobId)).state).toBe('running');
    });

    it('writes nothing when one member cannot be placed: its machine full, gone from work, or shared with another member', async () => {
      const { machines, jobId, stageId } = await setUp();
      // g3 is taken by another stage first.
      const other = await store.jobSubmit({
        definition: job([stage('one', { resources: { ...MEMBER, gpu: { count: 1, types: ['h100'] } } })]),
        source: null,
        now,
      });
      const took = await apply([{ stageId: other.stages[0]!.id, machineId: machines[2]!, gpuIndices: [1], ...MEMBER }]);
      expect(took.applied).toHaveLength(1);
      let r = await apply([gangPlacement(stageId, machines)]);
      expect(r.applied).toEqual([]);
      expect(r.skipped).toEqual([{ stageId, why: 'gang member rank 2 on g3: machine no longer has room' }]);
      const s = await stageOf(jobId);
      expect([s.state, s.currentAttemptId, s.attempts]).toEqual(['ready', null, []]);
      expect(await freeGpus()).toEqual({ g1: 2, g2: 2, g3: 1 });

      // A member's machine cordoned: the same, for that member.
      await store.machineCordon({ machine: 'g2', now });
      r = await apply([gangPlacement(stageId, [machines[0]!, machines[1]!, machines[0]!])]);
      expect(r.skipped).toEqual([{ stageId, why: 'gang member rank 1 on g2: machine no longer takes work' }]);
      await store.machineUncordon({ machine: 'g2', now });
      // Two members on one machine: refused, not half-checked.
      r = await apply([gangPlacement(stageId, [machines[0]!, machines[1]!, machines[0]!])]);
      expect(r.skipped).toEqual([{ stageId, why: 'gang member rank 2 on g1: another member is placed on the same machine' }]);
      expect((await stageOf(jobId)).attempts).toEqual([]);
      expect(await eventsOf('attempt:scheduled')).toHaveLength(1);
    });

    it('a member failing ends every other member, charged once; their reports are stale; the retry places the gang again', async () => {
      const { machines, jobId, members } = await running();
      const [r0, r1, r2] = members as [AttemptRecord, AttemptRecord, AttemptRecord];
      await exited(r1, 3);
      const reason = 'gang member rank 1 failed (exit code 3): ending ranks 0, 2';
      for (const a of [r0, r2]) expect(await attemptOf(a.id)).toMatchObject({ state: 'canceled', endKind: 'killed', reason });
      expect((await attemptOf(r1.id)).state).toBe('failed');
      let s = await stageOf(jobId);
      expect([s.state, s.attemptsUsed, s.lostUsed, s.currentAttemptId]).toEqual(['ready', 1, 0, null]);
      expect((await eventsOf('attempt:canceled')).map((e) => e.message)).toEqual([
        `stage train attempt 1 rank 0 canceled: ${reason}`,
        `stage train attempt 1 rank 2 canceled: ${reason}`,
      ]);
      // Their agents are told to kill them on their next heartbeat.
      const hb = await heartbeat(machines[0]!, [r0]);
      expect(hb.kill).toEqual([{ attemptId: r0.id, reason: `attempt is canceled: ${reason}` }]);
      // The members' own reports after that change nothing: the stage was charged once.
      await expect(exited(r0, 137)).rejects.toBeInstanceOf(StaleAttemptError);
      await expect(exited(r2, 0)).rejects.toBeInstanceOf(StaleAttemptError);
      s = await stageOf(jobId);
      expect([s.state, s.attemptsUsed]).toEqual(['ready', 1]);
      // The retry: the gang placed again as attempt 2, every token past the first attempt's.
      for (const m of machines) await heartbeat(m);
      const again = await apply([gangPlacement(s.id, machines)]);
      expect(again.applied.map((a) => [a.number, a.gang?.rank])).toEqual([
        [2, 0],
        [2, 1],
        [2, 2],
      ]);
      expect(Math.min(...again.applied.map((a) => a.token))).toBeGreaterThan(Math.max(...members.map((a) => a.token)));
    });

    it('succeeds only when every member has, committing rank 0 outputs alone', async () => {
      const { jobId, members } = await running();
      const [r0, r1, r2] = members as [AttemptRecord, AttemptRecord, AttemptRecord];
      await store.outputUploaded({ attemptId: r0.id, token: r0.token, path: 'model.pt', blob: blobKey('rank0/model.pt'), size: 5, now });
      await store.outputUploaded({ attemptId: r1.id, token: r1.token, path: 'rank1.pt', blob: blobKey('rank1/rank1.pt'), size: 4, now });
      expect((await exited(r0, 0, [{ path: 'model.pt', size: 5 }])).jobState).toBe('running');
      expect((await stageOf(jobId)).state).toBe('running');
      await exited(r2, 0);
      expect((await stageOf(jobId)).state).toBe('running');
      const last = await exited(r1, 0, [{ path: 'rank1.pt', size: 4 }]);
      expect(last.jobState).toBe('succeeded');
      const s = await stageOf(jobId);
      expect([s.state, s.outputAttemptId, s.attemptsUsed]).toEqual(['succeeded', r0.id, 0]);
      expect(s.outputs).toEqual([{ path: 'model.pt', size: 5, blob: blobKey('rank0/model.pt') }]);
      expect((await eventsOf('attempt:succeeded')).map((e) => e.message)).toEqual([
        'stage train attempt 1 rank 0 of 3 succeeded; waiting for ranks 1, 2',
        'stage train attempt 1 rank 2 of 3 succeeded; waiting for rank 1',
        'stage train attempt 1 rank 1 of 3 succeeded',
      ]);
      expect(await eventsOf('stage:succeeded')).toHaveLength(1);
      // The stage's log is rank 0's, by default and by the attempt's number.
      for (const a of [r0, r1]) {
        const text = `rank ${a.gang?.rank}\n`;
        await store.attemptLogAppend({ attemptId: a.id, token: a.token, chunks: [{ stream: 'stdout', offset: 0, bytes: text.length, data: text }], now });
      }
      for (const attempt of [undefined, 1]) {
        const logs = await store.stageLogs({ jobId, stage: 'train', limit: 10, ...(attempt ? { attempt } : {}) });
        expect(logs!.map((l) => [l.attemptNumber, l.rank, l.data])).toEqual([[1, 0, 'rank 0\n']]);
      }
      // Another member's log by its rank; every member's interleaved in the order stored, each with its rank.
      expect((await store.stageLogs({ jobId, stage: 'train', rank: 1, limit: 10 }))!.map((l) => [l.rank, l.data])).toEqual([[1, 'rank 1\n']]);
      expect((await store.stageLogs({ jobId, stage: 'train', rank: 2, limit: 10 }))!).toEqual([]);
      expect((await store.stageLogs({ jobId, stage: 'train', rank: 'all', attempt: 1, limit: 10 }))!.map((l) => [l.rank, l.data])).toEqual([
        [0, 'rank 0\n'],
        [1, 'rank 1\n'],
      ]);
    });

    it("a gang whose rank 0's agent named no host meets at rank 0's machine name", async () => {
      const { machines, stageId } = await setUp();
      const order = [machines[1]!, machines[0]!, machines[2]!];
      const r = await apply([gangPlacement(stageId, order)]);
      const handed = (await store.machineAssignments({ machineId: machines[2]! }))[0]!;
      expect(handed.gang).toMatchObject({ rank: 2, size: 3, masterAddr: 'g2' });
      expect(r.applied[0]!.machineName).toBe('g2');
    });

    it('a member failing after others succeeded fails the attempt; the successes stay', async () => {
      const { jobId, members } = await running();
      const [r0, r1, r2] = members as [AttemptRecord, AttemptRecord, AttemptRecord];
      await exited(r0, 0);
      await exited(r2, 1);
      expect((await attemptOf(r0.id)).state).toBe('succeeded');
      expect(await attemptOf(r1.id)).toMatchObject({ state: 'canceled', reason: 'gang member rank 2 failed (exit code 1): ending rank 1' });
      const s = await stageOf(jobId);
      expect([s.state, s.attemptsUsed, s.outputAttemptId]).toEqual(['ready', 1, null]);
    });

    it('members ending at once: all succeeding moves the stage once; two failing charge it once', async () => {
      const first = await running();
      await Promise.all(first.members.map((a) => exited(a, 0)));
      const s = await stageOf(first.jobId);
      expect([s.state, s.outputAttemptId]).toEqual(['succeeded', first.members[0]!.id]);
      expect(await eventsOf('stage:succeeded')).toHaveLength(1);

      const j = await store.jobSubmit({
        definition: job([stage('train', { resources: { ...MEMBER, gpu: { count: 2, types: ['h100'] }, machines: 3 } })]),
        source: null,
        now,
      });
      for (const m of first.machines) await heartbeat(m);
      const members = (await apply([gangPlacement(j.stages[0]!.id, first.machines)])).applied;
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 100, now, leaseMs: LEASE });
      const ends = await Promise.allSettled([exited(members[1]!, 1), exited(members[2]!, 2)]);
      // One of the two ended the gang; the other found its attempt ended by it.
      expect(ends.filter((e) => e.status === 'fulfilled')).toHaveLength(1);
      const rejected = ends.find((e) => e.status === 'rejected');
      expect(rejected?.reason).toBeInstanceOf(StaleAttemptError);
      const t = await stageOf(j.id);
      expect([t.state, t.attemptsUsed]).toEqual(['ready', 1]);
      expect(t.attempts.map((a) => a.state).sort()).toEqual(['canceled', 'canceled', 'failed']);
    });

    it("a preemptible gang's members are victims with their gang while they run (gang-preemption-conformance.ts); once ended and still held, they are leaving", async () => {
      const { machines } = await setUp();
      const j = await store.jobSubmit({
        definition: job([stage('train', { resources: { ...MEMBER, gpu: { count: 2, types: ['h100'] }, machines: 3 }, preemptible: true })]),
        source: null,
        now,
      });
      const members = (await apply([gangPlacement(j.stages[0]!.id, machines)])).applied;
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 100, now, leaseMs: LEASE });
      expect((await store.preemptionView()).map((v) => [v.attemptId, v.leaving, v.gang?.rank])).toEqual(members.map((a, rank) => [a.id, false, rank]));
      await store.jobCancel({ jobId: j.id, now, reason: 'canceled by a test' });
      const view = await store.preemptionView();
      expect(view.map((v) => [v.attemptId, v.leaving]).sort()).toEqual(members.map((a) => [a.id, true]).sort());
    });

    it('a cancel ends every member', async () => {
      const { jobId, members, machines } = await running();
      await store.jobCancel({ jobId, now, reason: 'canceled by a test' });
      for (const a of members) expect((await attemptOf(a.id)).state).toBe('canceled');
      expect((await stageOf(jobId)).state).toBe('canceled');
      for (const [i, m] of machines.entries()) {
        const a = members[i]!;
        const hb = await heartbeat(m, [a]);
        expect(hb.kill.map((k) => k.attemptId)).toEqual([a.id]);
      }
    });

    it("a member's machine lost ends the gang: the loss charged once, to the infrastructure's budget", async () => {
      const { jobId, members, machines } = await running();
      const [r0, r1, r2] = members as [AttemptRecord, AttemptRecord, AttemptRecord];
      const beat = async () => {
        for (const i of [0, 2]) {
          const a = members[i]!;
          await heartbeat(machines[i]!, [a]);
        }
      };
      // g2 falls silent; g1 and g3 keep beating.
      now += 5000;
      await beat();
      await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0 });
      now += 6000;
      await beat();
      const r = await store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0 });
      expect(r.lostAttempts).toEqual([r1.id]);
      expect((await attemptOf(r1.id)).state).toBe('lost');
      const reason = 'gang member rank 1 lost: machine g2 lost: ending ranks 0, 2';
      for (const a of [r0, r2]) expect(await attemptOf(a.id)).toMatchObject({ state: 'canceled', reason });
      const s = await stageOf(jobId);
      expect([s.state, s.attemptsUsed, s.lostUsed]).toEqual(['ready', 0, 1]);
      await expect(exited(r0, 1)).rejects.toBeInstanceOf(StaleAttemptError);
      expect((await stageOf(jobId)).lostUsed).toBe(1);
    });

    it('an ordinary stage is no gang: no gang fields, its number its token', async () => {
      const { machines } = await setUp();
      const j = await store.jobSubmit({ definition: job([stage('one', { resources: { ...MEMBER, gpu: null } })]), source: null, now });
      const a = (await apply([{ stageId: j.stages[0]!.id, machineId: machines[0]!, gpuIndices: [], ...MEMBER }])).applied[0]!;
      expect(a.gang).toBeUndefined();
      expect(a.number).toBe(a.token);
      expect((await store.machineAssignments({ machineId: machines[0]! }))[0]!.gang).toBeUndefined();
      expect((await attemptOf(a.id)).gang).toBeUndefined();
    });
  });
}
