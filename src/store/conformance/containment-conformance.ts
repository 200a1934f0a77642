import { beforeEach, describe, expect, it } from 'vitest';
import type { MachineContainment } from '../records.js';
import type { Store } from '../store.js';
import { cpuMachine, job, stage, startedOneStage } from './fixtures.js';

/** A report as an agent on a hybrid host sends it (docs/containment.md), with a field a later agent might add. */
const hybrid: MachineContainment & { later?: string } = {
  mechanism: 'cgroup-hybrid',
  memory: true,
  cpu: true,
  pids: true,
  devices: false,
  kill: 'cgroup.kill',
  user: 'dynamic 61184-65519',
  sandbox: null,
  problems: ['devices: the v1 devices controller is not writable here'],
  later: 'kept whole',
};

/**
 * Containment's records (migration 0019, docs/containment.md): what a machine's agent enforces,
 * what each attempt used, and the limits each assignment carries. Run inside storeConformance,
 * whose hooks open a fresh store for each test.
 */
export function containmentConformance(storeOf: () => Store): void {
  describe('containment: machines, usage, limits', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    /** A one-stage job placed on the machine and acknowledged. */
    const running = (machineId: string, over: Parameters<typeof stage>[1] = {}) => startedOneStage(store, { machineId, now, leaseMs: LEASE, stage: over });
    const attemptOf = async (jobId: string) => (await store.jobGet({ jobId }))!.stages[0]!.attempts[0]!;
    const eventOf = async (jobId: string, type: string) => (await store.eventsList({ jobId, limit: 100 })).find((e) => e.type === type)!;

    it("a machine's report is kept whole and read back everywhere; registering again without one says it no longer knows", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1', { agent: { version: '3', host: 'h', pid: 1 } }), containment: hybrid, now });
      expect(m.containment).toEqual(hybrid);
      expect((await store.machineGet({ machineId: m.id }))!.containment).toEqual(hybrid);
      expect((await store.machineFind({ machine: 'c1' }))!.containment).toEqual(hybrid);
      expect((await store.machineList()).map((x) => x.containment)).toEqual([hybrid]);
      // The agent's own description stays as it was sent, beside it.
      expect(m.agent).toEqual({ version: '3', host: 'h', pid: 1 });
      // An agent before containment registers the same machine again: what was said no longer holds.
      expect((await store.machineRegister({ ...cpuMachine('c1'), now: now + 1 })).containment).toBeNull();
      expect((await store.machineRegister({ ...cpuMachine('c2'), containment: null, now })).containment).toBeNull();
      const none: MachineContainment = { ...hybrid, mechanism: 'none', memory: false, cpu: false, pids: false, kill: 'process-group', problems: [] };
      delete (none as { later?: string }).later;
      expect((await store.machineRegister({ ...cpuMachine('c1'), containment: none, now: now + 2 })).containment).toEqual(none);
      // Each registration's event says what it enforces, so an operator following events sees a machine join uncontained.
      const said = (await store.eventsList({ limit: 100 })).filter((e) => e.type === 'machine:registered' && e.machineId === m.id);
      expect(said.map((e) => [e.message.replace(/^.*MiB/, ''), e.data.containment])).toEqual([
        ['; enforces memory, cpu, pids (cgroup-hybrid)', 'cgroup-hybrid'],
        ['', null],
        ['; enforces nothing (none): its stages are not contained', 'none'],
      ]);
    });

    it("an outcome's usage is stored with the attempt and carried by its event; none known, none said", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const oom = await running(m.id);
      // Past 2^32 bytes and a fraction of a second: a bigint and a double, both read back exactly.
      const usage = { memoryPeakBytes: 5 * 2 ** 30 + 7, cpuSeconds: 3.125 };
      await store.attemptComplete({
        attemptId: oom.a.id,
        token: oom.a.token,
        exitCode: null,
        signal: 'SIGKILL',
        end: { kind: 'oom-killed', detail: 'killed by its memory limit (5 GiB); raise resources.memory' },
        outputs: [],
        usage,
        now,
        jitter: 0,
      });
      expect(await attemptOf(oom.jobId)).toMatchObject({ endKind: 'oom-killed', ...usage });
      expect((await eventOf(oom.jobId, 'attempt:failed')).data).toMatchObject({ end: 'oom-killed', usage });

      // Through a batched report, a success with only its CPU time known.
      const ok = await running(m.id);
      const rep = await store.machineReport({
        machineId: m.id,
        started: [],
        completed: [
          {
            attemptId: ok.a.id,
            token: ok.a.token,
            exitCode: 0,
            signal: null,
            end: { kind: 'exited', detail: null },
            outputs: [],
            usage: { memoryPeakBytes: null, cpuSeconds: 0.5 },
          },
        ],
        now,
        leaseMs: LEASE,
        jitter: () => 0,
      });
      expect(rep.completed[0]!.result).toBe('ok');
      expect(await attemptOf(ok.jobId)).toMatchObject({ state: 'succeeded', memoryPeakBytes: null, cpuSeconds: 0.5 });
      expect((await eventOf(ok.jobId, 'attempt:succeeded')).data.usage).toEqual({ memoryPeakBytes: null, cpuSeconds: 0.5 });

      // An older agent says nothing, and an agent without a cgroup says it knows nothing: null, and no usage in the event.
      for (const said of [undefined, { memoryPeakBytes: null, cpuSeconds: null }]) {
        const r = await running(m.id);
        await store.attemptComplete({
          attemptId: r.a.id,
          token: r.a.token,
          exitCode: 1,
          signal: null,
          end: { kind: 'exited', detail: null },
          outputs: [],
          ...(said ? { usage: said } : {}),
          now,
          jitter: 0,
        });
        expect(await attemptOf(r.jobId)).toMatchObject({ state: 'failed', memoryPeakBytes: null, cpuSeconds: null });
        expect((await eventOf(r.jobId, 'attempt:failed')).data).not.toHaveProperty('usage');
      }
      // Running, nothing is known yet.
      const live = await running(m.id);
      expect(await attemptOf(live.jobId)).toMatchObject({ state: 'running', memoryPeakBytes: null, cpuSeconds: null });
    });

    it("an assignment carries the stage's request and limits; a definition stored before limits carries none beyond the request", async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const limited = await store.jobSubmit({
        definition: job([
          stage('limited', {
            resources: { cpuMillis: 2000, memoryBytes: 2 ** 30, gpu: null },
            limits: { memoryBytes: 3 * 2 ** 30, cpuMillis: 2500, pids: 64 },
            network: true,
          }),
        ]),
        source: null,
        now,
      });
      // The fixture's stage has neither field: as a definition stored before containment reads.
      const old = await store.jobSubmit({ definition: job([stage('old')]), source: null, now });
      await store.planApply({
        plan: {
          placements: [limited, old].map((j) => ({ stageId: j.stages[0]!.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })),
          pending: [],
        },
        now,
        leaseMs: LEASE,
      });
      const byStage = new Map((await store.machineAssignments({ machineId: m.id })).map((a) => [a.stageName, a.limits]));
      expect(byStage.get('limited')).toEqual({
        requestCpuMillis: 2000,
        requestMemoryBytes: 2 ** 30,
        memoryBytes: 3 * 2 ** 30,
        cpuMillis: 2500,
        pids: 64,
        network: true,
      });
      expect(byStage.get('old')).toEqual({
        requestCpuMillis: 1000,
        requestMemoryBytes: 2 ** 28,
        memoryBytes: null,
        cpuMillis: null,
        pids: null,
        network: false,
      });
    });
  });
}
