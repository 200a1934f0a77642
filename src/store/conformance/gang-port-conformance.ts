import { beforeEach, describe, expect, it } from 'vitest';
import type { PlannedPlacement } from '../../scheduler/snapshot.js';
import type { Store } from '../store.js';
import { cpuMachine, job, stage } from './fixtures.js';

/**
 * A gang's rendezvous as every adapter must keep it (issue 31, docs/gangs.md "Rendezvous"): rank
 * 0's machine's advertised address, and a master port reserved there when the gang is placed, from
 * the range its agent registered: the lowest no gang whose rank 0 holds room there has (nor one
 * placed earlier in the same plan), the gang skipped whole when none is left, a port free again
 * only once its attempt is released. Run inside storeConformance, whose hooks open a fresh store
 * for each test and close it.
 */
export function gangPortConformance(storeOf: () => Store): void {
  describe('gang rendezvous ports', () => {
    let store: Store;
    const now = 1_700_000_000_000;
    const LEASE = 10_000;
    const MEMBER = { cpuMillis: 1000, memoryBytes: 2 ** 28 };
    beforeEach(() => {
      store = storeOf();
    });

    /** Machines a and b; a's agent advertises 10.1.0.7 and keeps two ports for gangs. */
    const setUp = async () => {
      const a = await store.machineRegister({
        ...cpuMachine('a', { agent: { version: 'test', host: 'host-a', advertiseAddr: '10.1.0.7', gangPorts: { first: 40000, last: 40001 } } }),
        now,
      });
      const b = await store.machineRegister({ ...cpuMachine('b', { agent: { version: 'test', host: 'host-b' } }), now });
      return { a: a.id, b: b.id };
    };
    /** A job with one CPU gang of 2, placed rank 0 on `rank0`, rank 1 on `rank1`. */
    const jobOf = new Map<string, string>();
    const gang = async (rank0: string, rank1: string): Promise<PlannedPlacement> => {
      const j = await store.jobSubmit({ definition: job([stage('train', { resources: { ...MEMBER, gpu: null, machines: 2 } })]), source: null, now });
      jobOf.set(j.stages[0]!.id, j.id);
      const members = [rank0, rank1].map((machineId, rank) => ({ rank, machineId, gpuIndices: [] }));
      return { stageId: j.stages[0]!.id, machineId: rank0, gpuIndices: [], ...MEMBER, members };
    };
    const apply = (placements: PlannedPlacement[]) => store.planApply({ plan: { placements, pending: [] }, now, leaseMs: LEASE });
    const handedOn = async (machineId: string) => (await store.machineAssignments({ machineId })).map((x) => x.gang);

    it("meets at rank 0's advertised address, shown with its gang ports on the machine", async () => {
      const m = await setUp();
      const r = await apply([await gang(m.a, m.b)]);
      expect(r.skipped).toEqual([]);
      expect([...(await handedOn(m.a)), ...(await handedOn(m.b))]).toEqual([
        { rank: 0, size: 2, masterAddr: '10.1.0.7', masterPort: 40000 },
        { rank: 1, size: 2, masterAddr: '10.1.0.7', masterPort: 40000 },
      ]);
      expect(await store.machineGet({ machineId: m.a })).toMatchObject({ address: '10.1.0.7', gangPorts: { first: 40000, last: 40001 } });
      // An agent that advertised nothing: its host, and the default range.
      expect(await store.machineGet({ machineId: m.b })).toMatchObject({ address: 'host-b', gangPorts: { first: 29500, last: 29599 } });
    });

    it('reserves one port per gang on rank 0s machine, skips a gang whole when the range is full, and frees a port only once released', async () => {
      const m = await setUp();
      // Two gangs in one plan with rank 0 on a: two ports; a third finds a's range full and writes nothing.
      const r = await apply([await gang(m.a, m.b), await gang(m.a, m.b), await gang(m.a, m.b)]);
      expect(r.applied.map((x) => x.gang?.rank)).toEqual([0, 1, 0, 1]);
      expect(r.skipped).toEqual([{ stageId: expect.any(String), why: 'gang rank 0 on a: no free gang port in 40000-40001' }]);
      // The skipped gang says why where status and explain read it (the planner sees room for it now).
      const waiting = async () => (await store.jobGet({ jobId: jobOf.get(r.skipped[0]!.stageId)! }))!.stages[0]!;
      expect(await waiting()).toMatchObject({ state: 'ready', pendingReason: 'gang rank 0 on a: no free gang port in 40000-40001' });
      expect((await handedOn(m.a)).map((g) => g?.masterPort)).toEqual([40000, 40001]);
      // A gang with rank 0 on b takes from b's own range, whatever a holds.
      const onB = await apply([await gang(m.b, m.a)]);
      expect((await handedOn(m.b)).filter((g) => g?.rank === 0).map((g) => g?.masterPort)).toEqual([29500]);
      expect(onB.skipped).toEqual([]);

      // The first gang canceled: its rank 0 still holds room on a (its agent has not said it is gone), so its port stays taken.
      const first = r.applied[0]!;
      await store.jobCancel({ jobId: first.jobId, now, reason: 'test' });
      expect((await apply([await gang(m.a, m.b)])).skipped).toHaveLength(1);
      // a's agent runs nothing (the other gang's members were never acknowledged): the canceled rank 0 is released, and its port is the next gang's.
      await store.machineHeartbeat({
        machineId: m.a,
        running: [],
        now,
        leaseMs: LEASE,
        missingAfterMs: 4000,
        jitter: 0,
      });
      const again = await apply([await gang(m.a, m.b)]);
      expect(again.skipped).toEqual([]);
      // The gang skipped at first is placed now (rank 0 on b: a's range is full again), its reason cleared.
      const placedLater = await apply([{ ...(await gang(m.b, m.a)), stageId: r.skipped[0]!.stageId }]);
      expect(placedLater.skipped).toEqual([]);
      expect(await waiting()).toMatchObject({ state: 'scheduled', pendingReason: null });
      const rank0 = again.applied[0]!;
      expect((await store.machineAssignments({ machineId: m.a })).find((x) => x.attemptId === rank0.id)?.gang?.masterPort).toBe(40000);
    });
  });
}
