import { beforeEach, describe, expect, it } from 'vitest';
import { ValidationError } from '../../spec/validation-error.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import type { AttemptRecord } from '../records.js';
import type { Store } from '../store.js';
import { blobKey, cpuMachine, gangPlacement, gpuMachine, job, stage } from './fixtures.js';

/**
 * A gang's outputs (issue 31, docs/gangs.md "Outputs"), as every adapter must commit them: rank
 * 0's alone at their own paths by default; with `outputs.ranks: all`, every member's under
 * `rank-N/`, committed in the transaction of the last member's success, and only from the gang's
 * current attempt. Downstream stages, artifact collection and reruns read them as any committed
 * output. Run inside storeConformance, whose hooks open a fresh store for each test and close it.
 */
export function gangOutputsConformance(storeOf: () => Store): void {
  describe('gang outputs', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    const MEMBER = { cpuMillis: 4000, memoryBytes: 2 ** 30 };
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    /** Three machines of 2 h100 and one CPU machine; a job whose `train` is a gang of 3 and whose `eval` reads it. */
    const setUp = async (outputs?: StageDefinition['outputs']) => {
      const machines = [];
      for (const name of ['g1', 'g2', 'g3']) machines.push((await store.machineRegister({ ...gpuMachine(name, 2), now })).id);
      const cpu = (await store.machineRegister({ ...cpuMachine('c1'), now })).id;
      const train = stage('train', { resources: { ...MEMBER, gpu: { count: 2, types: ['h100'] }, machines: 3 }, ...(outputs ? { outputs } : {}) });
      const j = await store.jobSubmit({ definition: job([train, stage('eval', { needs: ['train'] })]), source: null, now });
      return { machines, cpu, jobId: j.id, trainId: j.stages[0]!.id, evalId: j.stages[1]!.id };
    };
    /** The gang placed and every member started: its members, by rank. */
    const start = async (stageId: string, machines: string[]) => {
      const members = (await store.planApply({ plan: { placements: [gangPlacement(stageId, machines, MEMBER)], pending: [] }, now, leaseMs: LEASE })).applied;
      expect(members).toHaveLength(3);
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 100, now, leaseMs: LEASE });
      return members as [AttemptRecord, AttemptRecord, AttemptRecord];
    };
    const upload = (a: AttemptRecord, path: string, text: string) =>
      store.outputUploaded({ attemptId: a.id, token: a.token, path, blob: blobKey(text), size: text.length, now });
    /** A member's end: exit 0 naming `files` (path → content, all uploaded before), or `exitCode`. */
    const exited = (a: AttemptRecord, files: Record<string, string> = {}, exitCode = 0) =>
      store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: Object.entries(files).map(([path, text]) => ({ path, size: text.length })),
        now,
        jitter: 0,
      });
    const stageOf = async (jobId: string, name: string) => (await store.jobGet({ jobId }))!.stages.find((s) => s.name === name)!;
    const file = (path: string, text: string) => ({ path, size: text.length, blob: blobKey(text) });
    /** Each member uploads and names its files; rank 0 names one under rank-1/ of its own, which must not meet rank 1's. */
    const FILES: Record<number, Record<string, string>> = {
      0: { 'model.pt': 'weights-0', 'rank-1/x.txt': 'rank 0 wrote this' },
      1: { 'x.txt': 'rank 1 wrote this', 'shard.bin': 'shard-1' },
      2: { 'shard.bin': 'shard-2' },
    };
    const runAll = async (members: AttemptRecord[], order = [1, 0, 2]) => {
      for (const m of members) for (const [path, text] of Object.entries(FILES[m.gang!.rank]!)) await upload(m, path, text);
      const states = [];
      for (const rank of order) states.push((await exited(members[rank]!, FILES[rank])).jobState);
      return states;
    };

    it("commits rank 0's outputs alone at their own paths by default (a definition without outputs)", async () => {
      const s = await setUp();
      const members = await start(s.trainId, s.machines);
      expect(await runAll(members)).toEqual(['running', 'running', 'running']);
      const train = await stageOf(s.jobId, 'train');
      expect([train.state, train.outputAttemptId]).toEqual(['succeeded', members[0].id]);
      expect(train.outputs).toEqual([file('model.pt', 'weights-0'), file('rank-1/x.txt', 'rank 0 wrote this')]);
      // The other ranks' files are not readable as the stage's.
      expect(await store.committedBlob({ attemptId: members[0].id, path: 'shard.bin' })).toBeNull();
    });

    it("with ranks: all, commits every member's under rank-N/ (rank 0's too) once the last succeeds; downstream reads them", async () => {
      const s = await setUp({ ranks: 'all' });
      const members = await start(s.trainId, s.machines);
      // Nothing is committed while a member runs, whichever finished first.
      await upload(members[1], 'x.txt', 'rank 1 wrote this');
      await upload(members[1], 'shard.bin', 'shard-1');
      await exited(members[1], FILES[1]);
      expect((await stageOf(s.jobId, 'train')).outputs).toBeNull();
      for (const rank of [0, 2]) for (const [path, text] of Object.entries(FILES[rank]!)) await upload(members[rank]!, path, text);
      await exited(members[0], FILES[0]);
      expect((await exited(members[2], FILES[2])).jobState).toBe('running');
      const train = await stageOf(s.jobId, 'train');
      expect([train.state, train.outputAttemptId]).toEqual(['succeeded', members[0].id]);
      const committed = [
        file('rank-0/model.pt', 'weights-0'),
        file('rank-0/rank-1/x.txt', 'rank 0 wrote this'),
        file('rank-1/shard.bin', 'shard-1'),
        file('rank-1/x.txt', 'rank 1 wrote this'),
        file('rank-2/shard.bin', 'shard-2'),
      ];
      expect(train.outputs).toEqual(committed);
      expect(await store.eventsList({ limit: 1000 }).then((es) => es.filter((e) => e.type === 'stage:succeeded'))).toHaveLength(1);

      // The downstream stage is handed every rank's files, as inputs of the attempt that committed them.
      const ev = (
        await store.planApply({ plan: { placements: [{ stageId: s.evalId, machineId: s.cpu, gpuIndices: [], ...MEMBER }], pending: [] }, now, leaseMs: LEASE })
      ).applied[0]!;
      const [handed] = await store.machineAssignments({ machineId: s.cpu });
      expect(handed!.attemptId).toBe(ev.id);
      expect(handed!.inputs).toEqual([{ stage: 'train', attemptId: members[0].id, files: committed.map(({ path, size }) => ({ path, size })) }]);
      expect(await store.machineReadsOutput({ machineId: s.cpu, attemptId: members[0].id })).toBe(true);
      expect(await store.committedBlob({ attemptId: members[0].id, path: 'rank-2/shard.bin' })).toEqual({ blob: blobKey('shard-2'), size: 7 });
      expect(await store.committedBlob({ attemptId: members[0].id, path: 'rank-1/x.txt' })).toEqual({ blob: blobKey('rank 1 wrote this'), size: 17 });
      // Under the member's own id nothing is committed: every file is the stage's, through rank 0's attempt.
      expect(await store.committedBlob({ attemptId: members[2].id, path: 'shard.bin' })).toBeNull();

      // Collection keeps them as any committed output; a rerun reuses them, paths and all.
      now += 3_600_000;
      expect((await store.artifactsCollect({ now, maxBytes: null, dryRun: true })).collect).toEqual([]);
      await store.attemptStart({ attemptId: ev.id, token: ev.token, pid: 7, now, leaseMs: LEASE });
      await exited(ev);
      const r = (await store.jobRerun({ jobId: s.jobId, from: ['eval'], now }))!;
      expect(r.plan.reused.map((x) => x.stage)).toEqual(['train']);
      const reused = r.job!.stages.find((x) => x.name === 'train')!;
      expect([reused.state, reused.outputAttemptId, reused.outputs]).toEqual(['succeeded', members[0].id, committed]);
      expect((await store.artifactsCollect({ now, maxBytes: null, dryRun: true })).collect).toEqual([]);
    });

    it("commits only the gang's current attempt's uploads: a failed attempt's members' files are never the stage's", async () => {
      const s = await setUp({ ranks: 'all' });
      const first = await start(s.trainId, s.machines);
      await upload(first[1], 'stale.bin', 'from attempt 1');
      await upload(first[2], 'shard.bin', 'attempt-1 shard');
      await exited(first[1], { 'stale.bin': 'from attempt 1' });
      // Rank 2 fails: the attempt fails, rank 0 is ended, the stage waits for its retry.
      await exited(first[2], {}, 1);
      expect((await stageOf(s.jobId, 'train')).state).toBe('ready');
      // While nothing runs, attempt 1's uploads are garbage (no manifest names them, no member of theirs is active).
      expect((await store.artifactsCollect({ now: now + 3_600_000, maxBytes: null, dryRun: true })).collect.map((c) => c.blob).sort()).toEqual(
        [blobKey('attempt-1 shard'), blobKey('from attempt 1')].sort(),
      );
      for (const m of s.machines) await store.machineHeartbeat({ machineId: m, running: [], now, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0 });
      const second = await start(s.trainId, s.machines);
      expect(second[0].number).toBe(2);
      await runAll(second);
      const train = await stageOf(s.jobId, 'train');
      expect(train.outputAttemptId).toBe(second[0].id);
      expect(train.outputs!.map((f) => f.path)).toEqual(['rank-0/model.pt', 'rank-0/rank-1/x.txt', 'rank-1/shard.bin', 'rank-1/x.txt', 'rank-2/shard.bin']);
      expect(train.outputs!.find((f) => f.path === 'rank-2/shard.bin')!.blob).toBe(blobKey('shard-2'));
    });

    for (const outputs of [undefined, { ranks: 'all' as const }]) {
      it(`keeps a succeeded member's uploads from collection while another member of its gang runs (${outputs ? 'ranks: all' : 'rank 0 only'})`, async () => {
        const s = await setUp(outputs);
        const members = await start(s.trainId, s.machines);
        await upload(members[0], 'model.pt', 'weights');
        await upload(members[1], 'shard.bin', 'shard');
        await exited(members[0], { 'model.pt': 'weights' });
        await exited(members[1], { 'shard.bin': 'shard' });
        // An hour on, rank 2 still running: what ranks 0 and 1 uploaded may still be committed.
        now += 3_600_000;
        expect((await store.artifactsCollect({ now, maxBytes: null, dryRun: false })).collect).toEqual([]);
        await exited(members[2]);
        const train = await stageOf(s.jobId, 'train');
        expect(train.state).toBe('succeeded');
        expect(await store.committedBlob({ attemptId: members[0].id, path: outputs ? 'rank-0/model.pt' : 'model.pt' })).toEqual({
          blob: blobKey('weights'),
          size: 7,
        });
        // Committed: every rank's when asked; rank 0's alone by default, rank 1's upload garbage once its gang has ended.
        const left = (await store.artifactsCollect({ now: now + 3_600_000, maxBytes: null, dryRun: true })).collect.map((c) => c.blob);
        expect(train.outputs!.map((f) => f.path)).toEqual(outputs ? ['rank-0/model.pt', 'rank-1/shard.bin'] : ['model.pt']);
        expect(left).toEqual(outputs ? [] : [blobKey('shard')]);
      });
    }

    it("checks a member's named files at its own report when every rank's are committed, and only then", async () => {
      const s = await setUp({ ranks: 'all' });
      const members = await start(s.trainId, s.machines);
      await upload(members[1], 'shard.bin', 'short');
      await expect(exited(members[1], { 'shard.bin': 'longer than uploaded' })).rejects.toThrow(ValidationError);
      await expect(exited(members[1], { 'missing.bin': 'x' })).rejects.toThrow(/output missing.bin was not uploaded/);
      // Nothing of the refused report was written: the member still runs, and its right report is taken.
      expect((await store.attemptGet({ attemptId: members[1].id }))!.state).toBe('running');
      expect((await exited(members[1], { 'shard.bin': 'short' })).accepted).toBe(true);
      await exited(members[0]);
      await exited(members[2]);
      expect((await stageOf(s.jobId, 'train')).outputs).toEqual([file('rank-1/shard.bin', 'short')]);
    });

    it('by default a member other than rank 0 names what it likes: its files are not committed, so not checked', async () => {
      const s = await setUp();
      const members = await start(s.trainId, s.machines);
      expect((await exited(members[2], { 'never-uploaded.bin': 'x' })).accepted).toBe(true);
      await exited(members[1]);
      await exited(members[0]);
      const train = await stageOf(s.jobId, 'train');
      expect([train.state, train.outputs]).toEqual(['succeeded', []]);
    });
  });
}
