import { beforeEach, describe, expect, it } from 'vitest';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import type { Store } from '../store.js';
import { gpuMachine, job, stage } from './fixtures.js';

/**
 * A gang preempted (issue 31, docs/gangs.md "Preemption"), as every adapter must do it: the
 * preemption view lists every active member of a preemptible gang with its gang; a plan whose
 * victims are the gang's members ends every member `preempted`, each told to stop with the
 * stage's grace to checkpoint, one event each, the stage charged nothing, its cool-down set and
 * requeued once. Run inside storeConformance, whose hooks open a fresh store for each test.
 */
export function gangPreemptionConformance(storeOf: () => Store): void {
  describe('gang preemption', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    const MEMBER = { cpuMillis: 4000, memoryBytes: 2 ** 30 };
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    /** Three machines of 2 h100, and a preemptible gang of 3 × 2 GPUs (grace 12 s) running on them. */
    const running = async () => {
      const machines = [];
      for (const name of ['g1', 'g2', 'g3']) machines.push((await store.machineRegister({ ...gpuMachine(name, 2, 'h100'), now })).id);
      const definition = job(
        [stage('train', { resources: { ...MEMBER, gpu: { count: 2, types: ['h100'] }, machines: 3 }, preemptible: true, preemptionGraceSeconds: 12 })],
        { priority: 10 },
      );
      const j = await store.jobSubmit({ definition, source: null, now });
      const stageId = j.stages[0]!.id;
      const placement: PlannedPlacement = {
        stageId,
        machineId: machines[0]!,
        gpuIndices: [0, 1],
        ...MEMBER,
        members: machines.map((machineId, rank) => ({ rank, machineId, gpuIndices: [0, 1] })),
      };
      const members = (await store.planApply({ plan: { placements: [placement], pending: [] }, now, leaseMs: LEASE })).applied;
      for (const a of members) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 100, now, leaseMs: LEASE });
      return { machines, jobId: j.id, stageId, members };
    };
    const stageOf = async (jobId: string) => (await store.jobGet({ jobId }))!.stages[0]!;

    it('lists every active member of a preemptible gang with its gang, rank and size', async () => {
      const { members } = await running();
      const view = await store.preemptionView();
      expect(view.map((v) => [v.attemptId, v.gang, v.leaving, v.preemptible, v.priority])).toEqual(
        members.map((a, rank) => [a.id, { id: members[0]!.id, size: 3, rank }, false, true, 10]),
      );
    });

    it('a plan naming the members ends every one preempted with the grace, one event each, the stage requeued once and charged nothing', async () => {
      const { machines, jobId, stageId, members } = await running();
      now += 1000;
      // As the planner lists a gang taken for a stage needing g2: the member there first, then the others by rank.
      const victims = [members[1]!, members[0]!, members[2]!].map((a) => ({ attemptId: a.id, token: a.token, stageId }));
      const reason = 'preempted on g2 for stage hi of job J (priority 900 over 10)';
      const r = await store.planApply({
        plan: { placements: [], pending: [], preemptions: [{ stageId: 'stg-hi', machineId: machines[1]!, victims, reason }] },
        now,
        leaseMs: LEASE,
      });
      expect(new Set(r.preempted)).toEqual(new Set(members.map((a) => a.id)));
      expect(r.preempted).toHaveLength(3);

      const s = await stageOf(jobId);
      // Requeued after the grace, no retry used, the cool-down's mark set.
      expect(s).toMatchObject({ state: 'ready', attemptsUsed: 0, notBefore: now + 12_000 });
      const peerReason = `gang member rank 1 ${reason}: ending ranks 0, 2`;
      expect(s.attempts.map((a) => [a.id, a.state, a.reason])).toEqual([
        [members[0]!.id, 'preempted', peerReason],
        [members[1]!.id, 'preempted', reason],
        [members[2]!.id, 'preempted', peerReason],
      ]);
      const events = (await store.eventsList({ limit: 1000 })).filter((e) => e.type === 'attempt:preempted');
      expect(events.map((e) => [e.attemptId, e.message])).toEqual([
        [members[1]!.id, `stage train attempt 1 rank 1 of 3 ${reason}; 12 s to checkpoint`],
        [members[0]!.id, `stage train attempt 1 rank 0 preempted: ${peerReason}; 12 s to checkpoint`],
        [members[2]!.id, `stage train attempt 1 rank 2 preempted: ${peerReason}; 12 s to checkpoint`],
      ]);
      expect(events.map((e) => (e.data as { graceMs: number }).graceMs)).toEqual([12_000, 12_000, 12_000]);
      // Nothing else of the gang's end: no member canceled, no stage requeued twice.
      expect((await store.eventsList({ limit: 1000 })).filter((e) => e.type === 'attempt:canceled')).toEqual([]);

      // Every member's agent is told to stop it with the stage's grace, as a preempted single attempt.
      for (const [i, a] of members.entries()) {
        const kill = await store.machineKillList({ machineId: machines[i]!, running: [{ attemptId: a.id, token: a.token }] });
        expect(kill).toEqual([{ attemptId: a.id, reason: `attempt is preempted: ${i === 1 ? reason : peerReason}`, graceMs: 12_000 }]);
      }
      // Each still holds its room until its agent stops listing it: leaving, for the planner; the
      // stage's cool-down runs from this preemption.
      expect((await store.preemptionView()).map((v) => [v.leaving, v.stagePreemptedAt])).toEqual(members.map(() => [true, now]));
      const again = await store.planApply({
        plan: { placements: [], pending: [], preemptions: [{ stageId: 'stg-hi', machineId: machines[0]!, victims, reason: 'again' }] },
        now,
        leaseMs: LEASE,
      });
      expect(again.preempted).toBeUndefined();
      expect(await stageOf(jobId)).toMatchObject({ state: 'ready', attemptsUsed: 0, notBefore: now + 12_000 });
    });
  });
}
