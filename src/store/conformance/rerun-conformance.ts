import { beforeEach, describe, expect, it } from 'vitest';
import { ConflictError, StaleAttemptError } from '../../domain/errors.js';
import { ValidationError } from '../../spec/validation-error.js';
import type { JobDefinition } from '../../domain/job-definition.js';
import type { JobDetail } from '../records.js';
import type { Store } from '../store.js';
import { blobKey, cpuMachine, gpuMachine, job, stage } from './fixtures.js';

/**
 * Outputs by reference, reruns and artifact collection (docs/rerun.md), as every adapter must show
 * them; run inside storeConformance, whose hooks open a fresh store (`storeOf`) for each test.
 */
export function rerunConformance(storeOf: () => Store): void {
  describe('outputs, rerun and collection', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    const stageOf = async (jobId: string, name: string) => (await store.jobGet({ jobId }))!.stages.find((s) => s.name === name)!;
    /** Places, starts and ends one stage: exit `exitCode` after `runMs`, having uploaded `files` (path → content). */
    const run = async (
      jobId: string,
      name: string,
      machineId: string,
      o: { exitCode?: number; runMs?: number; gpus?: number[]; files?: Record<string, string> } = {},
    ) => {
      const s = await stageOf(jobId, name);
      const r = await store.planApply({
        plan: { placements: [{ stageId: s.id, machineId, gpuIndices: o.gpus ?? [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now,
        leaseMs: LEASE,
      });
      const a = r.applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
      const files = Object.entries(o.files ?? {});
      for (const [path, text] of files) await store.outputUploaded({ attemptId: a.id, token: a.token, path, blob: blobKey(text), size: text.length, now });
      return store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode: o.exitCode ?? 0,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: (o.exitCode ?? 0) === 0 ? files.map(([path, text]) => ({ path, size: text.length })) : [],
        now: now + (o.runMs ?? 0),
        jitter: 0,
      });
    };
    /** A stage that fails for good at its first failure. */
    const once = { retry: { maxAttempts: 1, backoff: { initialSeconds: 1, maxSeconds: 10 }, onExitCodes: null, maxLost: 5 } };
    const chain = (): JobDefinition =>
      job(
        [
          stage('prep'),
          stage('train', { needs: ['prep'], resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 2, types: [] } } }),
          stage('eval', { needs: ['train'], ...once }),
        ],
        { name: 'chain' },
      );
    /** prep and train succeed (train on 2 GPUs for an hour), eval fails: the issue's job. */
    const failedChain = async () => {
      const cpu = await store.machineRegister({ ...cpuMachine('c1'), now });
      const gpu = await store.machineRegister({ ...gpuMachine('g1', 4), now });
      const j = await store.jobSubmit({ definition: chain(), source: 'name: chain', now });
      await run(j.id, 'prep', cpu.id, { runMs: 60_000, files: { 'data.txt': 'data' } });
      await run(j.id, 'train', gpu.id, { runMs: 3_600_000, gpus: [0, 1], files: { 'model.bin': 'weights', 'log/loss.csv': '1,0.5' } });
      await run(j.id, 'eval', cpu.id, { exitCode: 1 });
      expect((await store.jobGet({ jobId: j.id }))!.state).toBe('failed');
      return { job: j, cpu, gpu };
    };
    /** What a refusal must leave as it was. */
    const snapshot = async (jobId: string) => ({
      jobs: (await store.jobList({ limit: 1000 })).map((j) => [j.id, j.state]),
      events: (await store.eventsList({ limit: 10_000 })).length,
      job: await store.jobGet({ jobId }),
    });

    it('an outcome commits only what its attempt uploaded, whole; the manifest is written with the commit', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const a = (
        await store.planApply({
          plan: { placements: [{ stageId: j.stages[0]!.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
          now,
          leaseMs: LEASE,
        })
      ).applied[0]!;
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
      await expect(store.outputUploaded({ attemptId: a.id, token: a.token + 1, path: 'x', blob: blobKey('x'), size: 1, now })).rejects.toBeInstanceOf(
        StaleAttemptError,
      );
      await store.outputUploaded({ attemptId: a.id, token: a.token, path: 'out.txt', blob: blobKey('abc'), size: 3, now });
      const complete = (outputs: { path: string; size: number }[]) =>
        store.attemptComplete({
          attemptId: a.id,
          token: a.token,
          exitCode: 0,
          signal: null,
          end: { kind: 'exited' as const, detail: null },
          outputs,
          now,
          jitter: 0,
        });
      await expect(complete([{ path: 'out.txt', size: 4 }])).rejects.toThrow(/output out.txt was not uploaded whole \(3 bytes, not 4\)/);
      await expect(complete([{ path: 'other.txt', size: 1 }])).rejects.toBeInstanceOf(ValidationError);
      expect((await stageOf(j.id, 'a')).state).toBe('running');
      expect(await store.outputUploads({ attemptIds: [a.id] })).toEqual([{ attemptId: a.id, path: 'out.txt', blob: blobKey('abc'), size: 3 }]);
      await complete([{ path: 'out.txt', size: 3 }]);
      const s = await stageOf(j.id, 'a');
      expect(s.outputs).toEqual([{ path: 'out.txt', size: 3, blob: blobKey('abc') }]);
      expect(await store.committedBlob({ attemptId: a.id, path: 'out.txt' })).toEqual({ blob: blobKey('abc'), size: 3 });
      expect(await store.committedBlob({ attemptId: a.id, path: 'nope' })).toBeNull();
      // After the commit the attempt is over: nothing more is recorded for it.
      await expect(store.outputUploaded({ attemptId: a.id, token: a.token, path: 'late', blob: blobKey('late'), size: 4, now })).rejects.toBeInstanceOf(
        StaleAttemptError,
      );
    });

    it("a machine reads an attempt's committed outputs only while a stage that needs them is placed on it and active", async () => {
      const m1 = await store.machineRegister({ ...cpuMachine('m1'), now });
      const m2 = await store.machineRegister({ ...cpuMachine('m2'), now });
      const m3 = await store.machineRegister({ ...cpuMachine('m3'), now });
      const j = await store.jobSubmit({
        definition: job([stage('prep'), stage('train', { needs: ['prep'] }), stage('side'), stage('late', { needs: ['train'] })]),
        source: null,
        now,
      });
      await run(j.id, 'prep', m1.id, { files: { 'data.txt': 'data' } });
      const prep = (await stageOf(j.id, 'prep')).outputAttemptId!;
      const reads = (m: { id: string }, attemptId = prep) => store.machineReadsOutput({ machineId: m.id, attemptId });
      // Nothing that needs it is placed anywhere yet: not even the machine that made it reads it.
      expect([await reads(m1), await reads(m2), await reads(m3)]).toEqual([false, false, false]);
      const place = async (name: string, m: { id: string }) =>
        (
          await store.planApply({
            plan: {
              placements: [{ stageId: (await stageOf(j.id, name)).id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }],
              pending: [],
            },
            now,
            leaseMs: LEASE,
          })
        ).applied[0]!;
      const train = await place('train', m2);
      await place('side', m3);
      // Placed (scheduled): its machine reads its inputs; a machine running a stage of the same job that does not need them does not.
      expect([await reads(m1), await reads(m2), await reads(m3)]).toEqual([false, true, false]);
      expect(await reads(m2, 'att_unknown')).toBe(false);
      await store.attemptStart({ attemptId: train.id, token: train.token, pid: 1, now, leaseMs: LEASE });
      expect(await reads(m2)).toBe(true);
      await store.attemptComplete({
        attemptId: train.id,
        token: train.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      // Its stage ended: the machine reads it no longer.
      expect(await reads(m2)).toBe(false);
    });

    it('reruns from the failed stage: the stages before it reused (outputs by reference), it runs; linked both ways', async () => {
      const { job: orig, cpu } = await failedChain();
      const before = await store.jobGet({ jobId: orig.id });
      now += 1000;
      const r = (await store.jobRerun({ jobId: orig.id, now }))!;
      expect(r.plan.from).toEqual(['eval']);
      expect(r.plan.reused.map((x) => [x.stage, x.fromJob, x.runMs, x.gpus])).toEqual([
        ['prep', orig.id, 60_000, 0],
        ['train', orig.id, 3_600_000, 2],
      ]);
      expect(r.plan.rerun).toEqual([{ stage: 'eval', because: null }]);
      expect(r.plan.gpuMsSaved).toBe(2 * 3_600_000);
      expect(r.plan.runMsSaved).toBe(3_660_000);
      const j = r.job!;
      expect(j.id).not.toBe(orig.id);
      expect(j.rerunOf).toBe(orig.id);
      expect(j.rerunFrom).toEqual(['eval']);
      expect(j.state).toBe('running');
      expect(j.stages.map((s) => [s.name, s.state, s.attempts.length])).toEqual([
        ['prep', 'succeeded', 0],
        ['train', 'succeeded', 0],
        ['eval', 'ready', 0],
      ]);
      const train = j.stages[1]!;
      const origTrain = before!.stages[1]!;
      expect(train.reused).toEqual({ fromJob: orig.id, attemptId: origTrain.outputAttemptId, runMs: 3_600_000, gpus: 2 });
      expect(train.outputAttemptId).toBe(origTrain.outputAttemptId);
      // The same blobs: rows were copied, not bytes.
      expect(train.outputs).toEqual(origTrain.outputs);
      expect((await store.jobGet({ jobId: orig.id }))!.reruns).toEqual([j.id]);
      const events = await store.eventsList({ jobId: j.id, limit: 100 });
      expect(events.filter((e) => e.type === 'stage:reused').map((e) => e.stageName)).toEqual(['prep', 'train']);
      expect((await store.eventsList({ jobId: orig.id, limit: 100 })).some((e) => e.type === 'job:rerun' && e.message.includes(j.id))).toBe(true);
      // The stage that runs reads the original's committed outputs, named by the attempt that made them.
      await store.planApply({
        plan: { placements: [{ stageId: j.stages[2]!.id, machineId: cpu.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now,
        leaseMs: LEASE,
      });
      const [assignment] = await store.machineAssignments({ machineId: cpu.id });
      expect(assignment!.inputs).toEqual([
        {
          stage: 'train',
          attemptId: origTrain.outputAttemptId,
          files: [
            { path: 'log/loss.csv', size: 5 },
            { path: 'model.bin', size: 7 },
          ],
        },
      ]);
      expect(await store.committedBlob({ attemptId: origTrain.outputAttemptId!, path: 'model.bin' })).toEqual({ blob: blobKey('weights'), size: 7 });
      // A reused stage's outputs are read by the attempt that made them, in the other job, as inputs of this one's stage.
      expect(await store.machineReadsOutput({ machineId: cpu.id, attemptId: origTrain.outputAttemptId! })).toBe(true);
      await store.attemptStart({ attemptId: assignment!.attemptId, token: assignment!.token, pid: 2, now, leaseMs: LEASE });
      const done = await store.attemptComplete({
        attemptId: assignment!.attemptId,
        token: assignment!.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      expect(done.jobState).toBe('succeeded');
      // A rerun of the rerun: the marker still names the job whose attempt ran it, and the cost travels.
      const again = (await store.jobRerun({ jobId: j.id, from: ['eval'], now }))!;
      expect(again.job!.stages[1]!.reused).toEqual({ fromJob: orig.id, attemptId: origTrain.outputAttemptId, runMs: 3_600_000, gpus: 2 });
      expect(again.plan.gpuMsSaved).toBe(2 * 3_600_000);
    });

    it('a fan-in DAG rerun from a middle stage runs exactly what is downstream of it', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const def = job([
        stage('a'),
        stage('b', { needs: ['a'] }),
        stage('c', { needs: ['a'] }),
        stage('d', { needs: ['b', 'c'] }),
        stage('e', { needs: ['d'] }),
        stage('f'),
      ]);
      const j = await store.jobSubmit({ definition: def, source: null, now });
      for (const n of ['a', 'b', 'c', 'd', 'e', 'f']) await run(j.id, n, m.id, { files: { [`${n}.out`]: n } });
      expect((await store.jobGet({ jobId: j.id }))!.state).toBe('succeeded');
      // Nothing failed: a rerun must say from where.
      await expect(store.jobRerun({ jobId: j.id, now })).rejects.toThrow(/succeeded: no stage failed.*--from/);
      const r = (await store.jobRerun({ jobId: j.id, from: ['b'], now }))!;
      expect(r.plan.rerun).toEqual([
        { stage: 'b', because: null },
        { stage: 'd', because: 'b' },
        { stage: 'e', because: 'd' },
      ]);
      expect(r.plan.reused.map((x) => x.stage)).toEqual(['a', 'c', 'f']);
      expect(r.job!.stages.map((s) => [s.name, s.state])).toEqual([
        ['a', 'succeeded'],
        ['b', 'ready'],
        ['c', 'succeeded'],
        ['d', 'pending'],
        ['e', 'pending'],
        ['f', 'succeeded'],
      ]);
    });

    it('refusals write nothing: an unknown stage, a job not ended, a change to a reused stage or to the DAG, outputs gone, a stage that did not succeed', async () => {
      const { job: orig } = await failedChain();
      const cpu = await store.machineRegister({ ...cpuMachine('c2'), now });
      const broken = await store.jobSubmit({
        definition: job([stage('a', once), stage('b', { needs: ['a'] }), stage('c', { needs: ['b'] })], { name: 'broken' }),
        source: null,
        now,
      });
      await run(broken.id, 'a', cpu.id, { exitCode: 1 });
      const busy = await store.jobSubmit({ definition: job([stage('x')], { name: 'busy' }), source: null, now });
      const was = await snapshot(orig.id);
      await expect(store.jobRerun({ jobId: orig.id, from: ['evall'], now })).rejects.toMatchObject({
        issues: [{ path: '/from/0', message: expect.stringMatching(/has no stage "evall" \(did you mean "eval"\?\)/) }],
      });
      const changed = chain();
      changed.stages[1]!.command = ['python3', 'train.py', '--faster'];
      changed.stages[2]!.command = ['python3', 'eval.py'];
      await expect(store.jobRerun({ jobId: orig.id, definition: changed, now })).rejects.toMatchObject({
        issues: [
          { path: '/spec/stages/1/command', message: expect.stringMatching(/stage train is reused .* its command cannot change \(rerun it with --from train/) },
        ],
      });
      const reshaped = chain();
      reshaped.stages[2]!.needs = ['prep'];
      reshaped.stages.push(stage('extra'));
      const shape = await store.jobRerun({ jobId: orig.id, definition: reshaped, now }).catch((e: ValidationError) => e);
      expect((shape as ValidationError).issues.map((i) => i.path)).toEqual(['/spec/stages/2/needs', '/spec/stages/3/name']);
      await expect(store.jobRerun({ jobId: orig.id, definition: { ...chain(), name: 'renamed' }, now })).rejects.toThrow(/job's name cannot change/);
      // a failed in its job: it cannot be reused.
      await expect(store.jobRerun({ jobId: broken.id, from: ['b'], now })).rejects.toThrow(/stage a is failed in job .*--from a/);
      // A job not ended, without cancelRunning.
      await expect(store.jobRerun({ jobId: busy.id, from: ['x'], now })).rejects.toThrow(/is queued: .*--cancel-running/);
      expect(await snapshot(orig.id)).toEqual(was);
      expect(await store.jobRerun({ jobId: 'job_nope', now })).toBeNull();
    });

    it('cancelRunning cancels and reruns in one transaction; a dry run plans as if canceled and writes nothing', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
      await run(j.id, 'a', m.id, { files: { 'a.out': 'A' } });
      const b = (
        await store.planApply({
          plan: {
            placements: [{ stageId: (await stageOf(j.id, 'b')).id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }],
            pending: [],
          },
          now,
          leaseMs: LEASE,
        })
      ).applied[0]!;
      const was = await snapshot(j.id);
      const dry = (await store.jobRerun({ jobId: j.id, cancelRunning: true, dryRun: true, now }))!;
      expect(dry.job).toBeNull();
      expect(dry.plan.from).toEqual(['b']);
      expect(dry.plan.reused.map((x) => x.stage)).toEqual(['a']);
      expect(await snapshot(j.id)).toEqual(was);
      // A refusal after the cancel would have been undone with it: none is left behind.
      await expect(store.jobRerun({ jobId: j.id, from: ['zz'], cancelRunning: true, now })).rejects.toBeInstanceOf(ValidationError);
      expect(await snapshot(j.id)).toEqual(was);
      const r = (await store.jobRerun({ jobId: j.id, cancelRunning: true, cancelReason: 'rerun', now }))!;
      expect(r.canceled).toBe(true);
      const orig = (await store.jobGet({ jobId: j.id }))!;
      expect(orig.state).toBe('canceled');
      expect(orig.stages[1]!.attempts.find((x) => x.id === b.id)!.state).toBe('canceled');
      expect(r.job!.stages.map((s) => [s.name, s.state])).toEqual([
        ['a', 'succeeded'],
        ['b', 'ready'],
      ]);
    });

    it('an Idempotency-Key makes one rerun; another request with it is refused', async () => {
      const { job: orig } = await failedChain();
      const idempotency = { scope: 'team:ml', key: 'rerun-1', requestHash: 'h1' };
      const r = (await store.jobRerun({ jobId: orig.id, idempotency, now }))!;
      await expect(store.jobRerun({ jobId: orig.id, idempotency, now })).rejects.toMatchObject({ name: 'AlreadySubmitted', jobIds: [r.job!.id] });
      await expect(store.jobRerun({ jobId: orig.id, idempotency: { ...idempotency, requestHash: 'h2' }, now })).rejects.toBeInstanceOf(ConflictError);
      expect((await store.jobGet({ jobId: orig.id }))!.reruns).toEqual([r.job!.id]);
      // The same key and request from another caller (scope) is a fresh key: a rerun of its own.
      const other = (await store.jobRerun({ jobId: orig.id, idempotency: { ...idempotency, scope: 'token:tok_1' }, now }))!;
      expect(other.job!.id).not.toBe(r.job!.id);
      expect((await store.jobGet({ jobId: orig.id }))!.reruns).toEqual([r.job!.id, other.job!.id]);
    });

    it('deleting the original keeps what its rerun reuses; collection takes what no job names, oldest unreferenced first', async () => {
      const { job: orig, cpu } = await failedChain();
      const r = (await store.jobRerun({ jobId: orig.id, from: ['train'], now }))!;
      const collected = async () => (await store.artifactsCollect({ now, maxBytes: null, dryRun: true })).collect.map((c) => c.blob);
      expect(await collected()).toEqual([]);
      // An upload never committed (its attempt failed afterwards) is garbage once its attempt is over; while it runs, protected.
      const lone = await store.jobSubmit({ definition: job([stage('z')], { name: 'lone' }), source: null, now });
      const z = (
        await store.planApply({
          plan: { placements: [{ stageId: lone.stages[0]!.id, machineId: cpu.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
          now,
          leaseMs: LEASE,
        })
      ).applied[0]!;
      await store.attemptStart({ attemptId: z.id, token: z.token, pid: 3, now, leaseMs: LEASE });
      await store.outputUploaded({ attemptId: z.id, token: z.token, path: 'partial', blob: blobKey('partial'), size: 7, now });
      expect(await collected()).toEqual([]);
      await store.attemptComplete({
        attemptId: z.id,
        token: z.token,
        exitCode: 3,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      expect(await collected()).toEqual([blobKey('partial')]);
      now += 1000;
      expect(await store.jobDelete({ jobId: orig.id, now })).toMatchObject({ attempts: expect.any(Array) });
      // prep's outputs are named by the rerun (reused); train's were named only by the original.
      expect(await collected()).toEqual([blobKey('partial'), ...[blobKey('1,0.5'), blobKey('weights')].sort()]);
      const reused = (await store.jobGet({ jobId: r.job!.id }))!.stages[0]!;
      expect(reused.outputs).toEqual([{ path: 'data.txt', size: 4, blob: blobKey('data') }]);
      expect(await store.committedBlob({ attemptId: reused.outputAttemptId!, path: 'data.txt' })).toEqual({ blob: blobKey('data'), size: 4 });
      const done = await store.artifactsCollect({ now, maxBytes: null, dryRun: false });
      expect(done.collect.map((c) => c.why)).toEqual(['unreferenced', 'unreferenced', 'unreferenced']);
      expect(done.totalBytes).toBe(4 + 7 + 5 + 7);
      expect(done.bytesAfter).toBe(4);
      expect((await store.artifactsCollect({ now, maxBytes: null, dryRun: true })).totalBytes).toBe(4);
      // A blob whose file was written again meanwhile is recorded again, to be judged later.
      await store.artifactsKeep({ blobs: [{ blob: blobKey('weights'), size: 7 }], now });
      expect(await collected()).toEqual([blobKey('weights')]);
    });

    it('says which blob keys have a row, however many are asked', async () => {
      await failedChain();
      const asked = [blobKey('data'), ...Array.from({ length: 1200 }, (_, i) => blobKey(`absent ${i}`)), blobKey('weights')];
      expect((await store.artifactBlobsKnown({ keys: asked })).sort()).toEqual([blobKey('data'), blobKey('weights')].sort());
      expect(await store.artifactBlobsKnown({ keys: [] })).toEqual([]);
    });

    it("the size budget releases ended jobs' outputs oldest first, never those a rerun reuses nor a job still running", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const one = async (name: string, text: string) => {
        const j = await store.jobSubmit({ definition: job([stage('s')], { name }), source: null, now });
        await run(j.id, 's', m.id, { files: { 'out.bin': text } });
        now += 1000;
        return j;
      };
      const oldest = await one('oldest', 'x'.repeat(100));
      await one('shared', 'y'.repeat(200));
      const reuser = await store.jobSubmit({ definition: job([stage('s'), stage('t', { needs: ['s'], ...once })], { name: 'reuser' }), source: null, now });
      await run(reuser.id, 's', m.id, { files: { 'out.bin': 'z'.repeat(300) } });
      await run(reuser.id, 't', m.id, { exitCode: 1 });
      const rerun = (await store.jobRerun({ jobId: reuser.id, now }))!.job!;
      now += 1000;
      const newest = await one('newest', 'w'.repeat(400));
      // `shared`'s content is also committed by a job still running (its stage s done, t not).
      const live = await store.jobSubmit({ definition: job([stage('s'), stage('t', { needs: ['s'] })], { name: 'live' }), source: null, now });
      await run(live.id, 's', m.id, { files: { 'same.bin': 'y'.repeat(200) } });
      const plan = (maxBytes: number, dryRun = true) => store.artifactsCollect({ now, maxBytes, dryRun });
      expect((await plan(10_000)).release).toEqual([]);
      const dry = await plan(600);
      expect(dry.totalBytes).toBe(1000);
      // oldest goes first; shared's blob is also live's; reuser's s is reused by its rerun: skipped; then newest.
      expect(dry.release.map((r) => [r.jobId, r.stage, r.bytes])).toEqual([
        [oldest.id, 's', 100],
        [newest.id, 's', 400],
      ]);
      expect(dry.bytesAfter).toBe(500);
      expect((await stageOf(oldest.id, 's')).outputs).not.toBeNull();
      const done = await plan(600, false);
      expect(done.collect.filter((c) => c.why === 'released').map((c) => c.blob)).toEqual([blobKey('x'.repeat(100)), blobKey('w'.repeat(400))]);
      const released = await stageOf(oldest.id, 's');
      expect(released.outputs).toBeNull();
      expect(released.outputsReleasedAt).toBe(now);
      expect((await store.eventsList({ jobId: oldest.id, limit: 100 })).some((e) => e.type === 'stage:outputs-released')).toBe(true);
      expect((await stageOf(rerun.id, 's')).outputs).toHaveLength(1);
      // What is left is all protected: the store stays over a budget it cannot meet, and says so.
      const tight = await plan(100);
      expect(tight.release).toEqual([]);
      expect(tight.bytesAfter).toBe(500);
      // A stage whose outputs are gone cannot be reused.
      const j2 = await store.jobSubmit({ definition: job([stage('s'), stage('t', { needs: ['s'], ...once })], { name: 'gone' }), source: null, now });
      await run(j2.id, 's', m.id, { files: { 'g.bin': 'g'.repeat(50) } });
      await run(j2.id, 't', m.id, { exitCode: 1 });
      now += 1000;
      await plan(0, false);
      await expect(store.jobRerun({ jobId: j2.id, now })).rejects.toThrow(
        /stage s's committed outputs in job .* are gone \(released .*over its size budget\).*--from s/,
      );
    });

    it('retention keeps outputs a rerun still names', async () => {
      const { job: orig } = await failedChain();
      const r = (await store.jobRerun({ jobId: orig.id, now }))!;
      now += 10_000;
      const out = await store.jobsExpire({ finishedBefore: now, limit: 10, now });
      expect(out.jobs).toEqual([orig.id]);
      const j: JobDetail = (await store.jobGet({ jobId: r.job!.id }))!;
      expect(j.stages[1]!.outputs!.map((o) => o.blob)).toEqual([blobKey('1,0.5'), blobKey('weights')]);
      expect((await store.artifactsCollect({ now, maxBytes: null, dryRun: true })).collect).toEqual([]);
    });
  });
}
