import { beforeEach, describe, expect, it } from 'vitest';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import type { Store } from '../store.js';
import { gpuMachine, job, stage } from './fixtures.js';

/**
 * Backfill around a gang's hold (docs/gangs.md, "Backfill"), as every adapter must read it:
 * `heldUntil` lists each member of a running gang as an attempt on its own machine, with its GPUs
 * and room and the end its stage's time limit gives it (its own start, or now for one not
 * started; now for one the server has ended and its agent still holds), so that the planner's
 * expected start of a gang held those machines is the latest of theirs. Run inside
 * storeConformance, whose hooks open a fresh store for each test and close it.
 */
export function gangHeldUntilConformance(storeOf: () => Store): void {
  describe('gangs: heldUntil (backfill)', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    const MEMBER = { cpuMillis: 2000, memoryBytes: 2 ** 30 };
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    /** Three machines of 4 h100; a gang of 3 × 2 GPUs with a time limit of 100 s placed on them, rank r on machine r, GPUs 2 and 3. */
    const setUp = async (timeoutSeconds: number | null) => {
      const ids: string[] = [];
      for (const name of ['g1', 'g2', 'g3']) ids.push((await store.machineRegister({ ...gpuMachine(name, 4), now })).id);
      const j = await store.jobSubmit({
        definition: job([stage('train', { resources: { ...MEMBER, gpu: { count: 2, types: ['h100'] }, machines: 3 }, timeoutSeconds })]),
        source: null,
        now,
      });
      const placement: PlannedPlacement = {
        stageId: j.stages[0]!.id,
        machineId: ids[0]!,
        gpuIndices: [2, 3],
        ...MEMBER,
        members: ids.map((machineId, rank) => ({ rank, machineId, gpuIndices: [2, 3] })),
      };
      const members = (await store.planApply({ plan: { placements: [placement], pending: [] }, now, leaseMs: LEASE })).applied;
      expect(members).toHaveLength(3);
      return { ids, members, jobId: j.id };
    };
    const byMachine = async (ids: string[]) => {
      const rows = await store.heldUntil({ machineIds: ids, now });
      return ids.map((id) => rows.filter((r) => r.machineId === id));
    };

    it("lists each member on its own machine, with its GPUs, its room and its own start plus the stage's time limit", async () => {
      const { ids, members } = await setUp(100);
      const t0 = now;
      // Rank 0 starts at once, rank 1 ten seconds later; rank 2 has not started yet.
      await store.attemptStart({ attemptId: members[0]!.id, token: members[0]!.token, pid: 1, now, leaseMs: LEASE });
      now += 10_000;
      await store.attemptStart({ attemptId: members[1]!.id, token: members[1]!.token, pid: 1, now, leaseMs: LEASE });
      now += 5_000;
      const rows = await byMachine(ids);
      expect(rows).toEqual([
        [{ machineId: ids[0], gpuIndices: [2, 3], ...MEMBER, endsBy: t0 + 100_000 }],
        [{ machineId: ids[1], gpuIndices: [2, 3], ...MEMBER, endsBy: t0 + 110_000 }],
        // Not started: as if it started now.
        [{ machineId: ids[2], gpuIndices: [2, 3], ...MEMBER, endsBy: now + 100_000 }],
      ]);
      // Only the machines asked for.
      expect(await store.heldUntil({ machineIds: [ids[1]!], now })).toEqual(rows[1]);
    });

    it('a gang without a time limit: every member holds without an end (nothing backfills before it)', async () => {
      const { ids, members } = await setUp(null);
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
      expect((await byMachine(ids)).map((r) => r.map((x) => x.endsBy))).toEqual([[null], [null], [null]]);
    });

    it('a member that fails ends the others: each held until its agent lets go, as ending now', async () => {
      const { ids, members } = await setUp(null);
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
      const m = members[1]!;
      await store.attemptComplete({
        attemptId: m.id,
        token: m.token,
        exitCode: 3,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      now += 1000;
      // The failed member's process is gone (its agent reported its exit): its room is free. The
      // other two are canceled, their agents not yet told: room that frees within the kill grace.
      expect((await byMachine(ids)).map((r) => r.map((x) => x.endsBy))).toEqual([[now], [], [now]]);
    });
  });
}
