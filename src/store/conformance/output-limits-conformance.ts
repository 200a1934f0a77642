import { beforeEach, describe, expect, it } from 'vitest';
import { OutputLimitExceeded, StaleAttemptError } from '../../domain/errors.js';
import type { OutputPolicy } from '../../domain/output-limits.js';
import type { Store } from '../store.js';
import { blobKey, cpuMachine, job, stage, startedOneStage } from './fixtures.js';

const KiB = 1024;
/** Small numbers, so that a few uploads reach each limit. */
const policy: OutputPolicy = { stageDefault: { bytes: 10 * KiB, files: 3 }, stageMax: { bytes: 20 * KiB, files: 5 }, teamMaxBytes: null };

/**
 * Output limits (docs/security.md, "Output limits"): the room an upload has under its stage's and
 * its team's limits, the same check again as the upload is recorded, and the limits each
 * assignment carries. Run inside storeConformance, whose hooks open a fresh store for each test.
 */
export function outputLimitsConformance(storeOf: () => Store): void {
  describe('output limits', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    /** A one-stage job of `team` placed on a machine of its own and started. */
    const running = async (over: Parameters<typeof stage>[1] = {}, team = 'default') => {
      const m = await store.machineRegister({ ...cpuMachine(`m-${Math.random().toString(36).slice(2, 8)}`), now });
      return { ...(await startedOneStage(store, { machineId: m.id, now, leaseMs: LEASE, stage: over, team })), machineId: m.id };
    };
    const upload = (a: { id: string; token: number }, path: string, size: number, p: OutputPolicy | null = policy) =>
      store.outputUploaded({ attemptId: a.id, token: a.token, path, blob: blobKey(`${a.id}/${path}/${size}`), size, now, ...(p ? { policy: p } : {}) });
    const room = (a: { id: string; token: number }, path: string, p = policy) => store.outputUploadRoom({ attemptId: a.id, token: a.token, path, policy: p });

    it("an assignment carries the stage's output limits under the policy: its own, the default, never above the most", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const j = await store.jobSubmit({
        definition: job([
          stage('own', { outputLimits: { bytes: 4 * KiB, files: 2 } }),
          stage('none'),
          stage('big', { outputLimits: { bytes: 99 * KiB, files: null } }),
        ]),
        source: null,
        now,
      });
      await store.planApply({
        plan: {
          placements: j.stages.map((s) => ({ stageId: s.id, machineId: m.id, gpuIndices: [], cpuMillis: 100, memoryBytes: 2 ** 20 })),
          pending: [],
        },
        now,
        leaseMs: LEASE,
      });
      const byStage = new Map((await store.machineAssignments({ machineId: m.id, outputs: policy })).map((x) => [x.stageName, x.limits.outputs]));
      expect(Object.fromEntries(byStage)).toEqual({
        own: { bytes: 4 * KiB, files: 2 },
        none: { bytes: 10 * KiB, files: 3 },
        big: { bytes: 20 * KiB, files: 3 },
      });
      // Without the policy, none is sent (an assignment as before output limits).
      expect((await store.machineAssignments({ machineId: m.id }))[0]!.limits).not.toHaveProperty('outputs');
    });

    it("the room is the stage's bytes less the attempt's other uploads; a path sent again replaces its own", async () => {
      const { a } = await running({ outputLimits: { bytes: 8 * KiB, files: null } });
      expect(await room(a, 'x')).toMatchObject({ bytes: 8 * KiB, limit: 'stage-bytes' });
      await upload(a, 'x', 3 * KiB);
      expect((await room(a, 'y')).bytes).toBe(5 * KiB);
      // The same path again: its own earlier size does not count against it.
      expect((await room(a, 'x')).bytes).toBe(8 * KiB);
      await upload(a, 'x', 6 * KiB);
      // Recorded over the room (two uploads that each found room before either was recorded): refused, nothing recorded.
      const over = await upload(a, 'y', 3 * KiB).catch((e: unknown) => e);
      expect(over).toBeInstanceOf(OutputLimitExceeded);
      expect(over).toMatchObject({
        limit: 'stage-bytes',
        message: expect.stringMatching(/^output y \(3 KiB\) is over the stage's limit of 8 KiB \(6 KiB of other/),
      });
      expect((await store.outputUploads({ attemptIds: [a.id] })).map((u) => [u.path, u.size])).toEqual([['x', 6 * KiB]]);
      // Without a policy (a file an earlier version left, recorded as it lies), nothing is checked.
      await upload(a, 'legacy', 9 * KiB, null);
    });

    it('a file past the count is refused before its bytes, and as it is recorded', async () => {
      const { a } = await running({ outputLimits: { bytes: null, files: 2 } });
      await upload(a, 'one', 1);
      await upload(a, 'two', 1);
      await expect(room(a, 'three')).rejects.toMatchObject({ limit: 'stage-files', message: expect.stringContaining("over the stage's limit of 2 files") });
      await expect(upload(a, 'three', 1)).rejects.toBeInstanceOf(OutputLimitExceeded);
      // One already there may be sent again.
      expect((await room(a, 'two')).bytes).toBe(10 * KiB - 1);
      await upload(a, 'two', 2);
      expect((await store.outputUploads({ attemptIds: [a.id] })).length).toBe(2);
    });

    it("a team's committed outputs and the attempt's own uploads bound its uploads; other teams are not counted", async () => {
      const teamPolicy: OutputPolicy = { ...policy, teamMaxBytes: 12 * KiB };
      const done = async (team: string, files: Record<string, number>) => {
        const { a } = await running({}, team);
        for (const [path, size] of Object.entries(files)) await upload(a, path, size, teamPolicy);
        await store.attemptComplete({
          attemptId: a.id,
          token: a.token,
          exitCode: 0,
          signal: null,
          end: { kind: 'exited', detail: null },
          outputs: Object.entries(files).map(([path, size]) => ({ path, size })),
          now,
          jitter: 0,
        });
      };
      await done('vision', { w: 6 * KiB, v: 2 * KiB });
      await done('nlp', { big: 9 * KiB });
      const { a } = await running({}, 'vision');
      expect(await room(a, 'n', teamPolicy)).toMatchObject({
        bytes: 4 * KiB,
        limit: 'team-bytes',
        says: expect.stringContaining("team vision's limit of 12 KiB"),
      });
      await upload(a, 'n', 3 * KiB, teamPolicy);
      // The attempt's own uploads count too, before they are committed.
      expect((await room(a, 'm', teamPolicy)).bytes).toBe(1 * KiB);
      await expect(upload(a, 'm', 2 * KiB, teamPolicy)).rejects.toMatchObject({ limit: 'team-bytes' });
      // Another team has its own room; with no team bound, the stage's alone.
      const other = await running({}, 'nlp');
      expect((await room(other.a, 'x', teamPolicy)).bytes).toBe(3 * KiB);
      expect(await room(other.a, 'x')).toMatchObject({ bytes: 10 * KiB, limit: 'stage-bytes' });
    });

    it("a team's own bound (its quota's outputs) stands before the server's, with or without one", async () => {
      await store.teamPut({ name: 'own', quota: { outputBytes: 5 * KiB }, create: true, now });
      const done = await running({}, 'own');
      await upload(done.a, 'w', 2 * KiB);
      await store.attemptComplete({
        attemptId: done.a.id,
        token: done.a.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: [{ path: 'w', size: 2 * KiB }],
        now,
        jitter: 0,
      });
      const { a } = await running({}, 'own');
      expect(await room(a, 'x')).toMatchObject({ bytes: 3 * KiB, limit: 'team-bytes', says: expect.stringContaining("team own's limit of 5 KiB") });
      expect((await room(a, 'x', { ...policy, teamMaxBytes: 100 * KiB })).bytes).toBe(3 * KiB);
      await expect(upload(a, 'x', 4 * KiB)).rejects.toMatchObject({ limit: 'team-bytes' });
    });

    it('the room is fenced as any upload: a stale token or another machine is refused', async () => {
      const { a } = await running();
      await expect(store.outputUploadRoom({ attemptId: a.id, token: a.token + 1, path: 'x', policy })).rejects.toBeInstanceOf(StaleAttemptError);
      const other = await store.machineRegister({ ...cpuMachine('elsewhere'), now });
      await expect(store.outputUploadRoom({ attemptId: a.id, token: a.token, machineId: other.id, path: 'x', policy })).rejects.toBeInstanceOf(
        StaleAttemptError,
      );
    });
  });
}
