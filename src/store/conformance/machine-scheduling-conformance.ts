import { beforeEach, describe, expect, it } from 'vitest';
import { ConflictError, NotFoundError } from '../../domain/errors.js';
import type { Store } from '../store.js';
import { cpuMachine, job, stage } from './fixtures.js';

/**
 * The operator's verbs on machines (cordon, uncordon, drain, remove), as every adapter must show
 * them; run inside storeConformance, whose hooks open a fresh store (`storeOf`) for each test and
 * close it.
 */
export function machineSchedulingConformance(storeOf: () => Store): void {
  describe('machine scheduling: cordon, uncordon, drain, remove', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    const reap = () => store.machinesReap({ now, suspectAfterMs: 4000, lostAfterMs: 10_000, jitter: 0 });
    const heartbeat = (machineId: string, running: { attemptId: string; token: number }[]) =>
      store.machineHeartbeat({ machineId, running, now, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0 });
    const machineEvents = async (machineId: string) =>
      (await store.eventsList({ limit: 1000 })).filter((e) => e.machineId === machineId && e.type.startsWith('machine:')).map((e) => e.type);
    /** Submits a one-stage job and places it on the machine, bypassing the scheduler's checks. */
    const runOn = async (machineId: string) => {
      const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const s = j.stages[0]!;
      const r = await store.planApply({
        plan: { placements: [{ stageId: s.id, machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now,
        leaseMs: LEASE,
      });
      return { job: j, applied: r.applied, skipped: r.skipped };
    };
    const start = async (a: { id: string; token: number }) => {
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 7, now, leaseMs: LEASE });
    };
    const finish = (a: { id: string; token: number }) =>
      store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        now,
        jitter: 0,
      });

    it('cordon: no new work, by name or id, once (a repeat changes nothing); the scheduler sees it', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      expect(m.scheduling).toBe('eligible');
      const first = await store.machineCordon({ machine: 'c1', now });
      expect(first.changed).toBe(true);
      expect(first.machine.scheduling).toBe('cordoned');
      expect(first.machine.health).toBe('ready');
      const again = await store.machineCordon({ machine: m.id, now });
      expect(again.changed).toBe(false);
      expect(await machineEvents(m.id)).toEqual(['machine:registered', 'machine:cordoned']);
      expect((await store.clusterView()).machines[0]!.scheduling).toBe('cordoned');
      const placed = await runOn(m.id);
      expect(placed.applied).toEqual([]);
      expect(placed.skipped[0]!.why).toBe('machine no longer takes work');
    });

    it('drain with stopRunning: what runs there is stopped at once, back in the queue, charged to no budget', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const { job: j, applied } = await runOn(m.id);
      await start(applied[0]!);
      const r = await store.machineDrain({ machine: 'c1', now, stopRunning: true, jitter: 0 });
      expect(r.changed).toBe(true);
      expect(r.stopped).toBe(1);
      expect(r.machine.scheduling).toBe('draining');
      const s = (await store.jobGet({ jobId: j.id }))!.stages[0]!;
      expect(s.state).toBe('ready');
      expect(s.lostUsed).toBe(0);
      expect(s.attemptsUsed).toBe(0);
      expect(s.attempts[0]!.state).toBe('lost');
      expect(s.attempts[0]!.reason).toMatch(/^stopped: machine c1 drained at once by an operator/);
      // Its agent is told to kill it; once it stops listing it, the machine is drained.
      expect((await heartbeat(m.id, [{ attemptId: applied[0]!.id, token: applied[0]!.token }])).kill.map((k) => k.attemptId)).toEqual([applied[0]!.id]);
      await heartbeat(m.id, []);
      const after = (await store.machineFind({ machine: 'c1' }))!;
      expect([after.scheduling, after.allocated.attempts]).toEqual(['draining', 0]);
      // Again: nothing left to stop.
      expect((await store.machineDrain({ machine: 'c1', now, stopRunning: true, jitter: 0 })).stopped ?? 0).toBe(0);
    });

    it('an unknown machine is NotFoundError for every verb', async () => {
      const nope = { machine: 'nope', now };
      const verbs = [() => store.machineCordon(nope), () => store.machineUncordon(nope), () => store.machineDrain(nope), () => store.machineRemove(nope)];
      for (const verb of verbs) {
        await expect(verb()).rejects.toBeInstanceOf(NotFoundError);
      }
      expect(await store.machineFind({ machine: 'nope' })).toBeNull();
    });

    it('a cordon outlives heartbeats, re-registering, and the machine being lost and coming back; the loss is still found', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const a = (await runOn(m.id)).applied[0]!;
      await start(a);
      await store.machineCordon({ machine: 'c1', now });
      // What runs there goes on: the attempt keeps running, its lease renewed.
      expect((await heartbeat(m.id, [{ attemptId: a.id, token: a.token }])).kill).toEqual([]);
      await store.machineRegister({ ...cpuMachine('c1'), now });
      expect((await store.machineFind({ machine: 'c1' }))!.scheduling).toBe('cordoned');
      // Silent: suspect, then lost with its attempt, as any machine.
      now += 5000;
      expect((await reap()).machines).toEqual([{ machineId: m.id, from: 'ready', to: 'suspect' }]);
      now += 6000;
      const lost = await reap();
      expect(lost.machines[0]!.to).toBe('lost');
      expect(lost.lostAttempts).toEqual([a.id]);
      const back = await heartbeat(m.id, []);
      expect(back.health).toBe('ready');
      const after = (await store.machineFind({ machine: 'c1' }))!;
      expect([after.health, after.scheduling]).toEqual(['ready', 'cordoned']);
    });

    it('drain: what runs there finishes, nothing new starts; uncordon puts it back in service and wakes the scheduler', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      const a = (await runOn(m.id)).applied[0]!;
      await start(a);
      const d = await store.machineDrain({ machine: 'c1', now });
      expect([d.changed, d.machine.scheduling, d.machine.allocated.attempts]).toEqual([true, 'draining', 1]);
      // Cordoning a draining machine changes nothing; draining it again neither.
      expect((await store.machineCordon({ machine: 'c1', now })).changed).toBe(false);
      expect((await store.machineDrain({ machine: 'c1', now })).changed).toBe(false);
      expect((await runOn(m.id)).applied).toEqual([]);
      // A draining machine that misses heartbeats and comes back is still draining.
      now += 5000;
      await reap();
      await heartbeat(m.id, [{ attemptId: a.id, token: a.token }]);
      expect((await store.machineFind({ machine: 'c1' }))!.scheduling).toBe('draining');
      await finish(a);
      await heartbeat(m.id, []);
      const drained = (await store.machineFind({ machine: 'c1' }))!;
      expect([drained.scheduling, drained.allocated.attempts]).toEqual(['draining', 0]);
      await store.outboxMarkPublished({ ids: (await store.outboxPending({ limit: 1000 })).map((o) => o.id), now });
      const up = await store.machineUncordon({ machine: 'c1', now });
      expect([up.changed, up.machine.scheduling]).toEqual([true, 'eligible']);
      expect((await store.outboxPending({ limit: 10 })).map((o) => [o.topic, 'machineId' in o.payload ? o.payload.machineId : null])).toEqual([
        ['capacity:freed', m.id],
      ]);
      expect((await store.machineUncordon({ machine: 'c1', now })).changed).toBe(false);
      expect((await runOn(m.id)).applied).toHaveLength(1);
      expect(await machineEvents(m.id)).toEqual(['machine:registered', 'machine:draining', 'machine:suspect', 'machine:ready', 'machine:uncordoned']);
    });

    it('drain a cordoned machine; cordon or drain a lost one', async () => {
      await store.machineRegister({ ...cpuMachine('c1'), now });
      await store.machineCordon({ machine: 'c1', now });
      expect((await store.machineDrain({ machine: 'c1', now })).machine.scheduling).toBe('draining');
      await store.machineRegister({ ...cpuMachine('c2'), now: now - 20_000 });
      await reap();
      expect((await store.machineCordon({ machine: 'c2', now })).machine).toMatchObject({ health: 'lost', scheduling: 'cordoned' });
    });

    it('remove refuses a machine in service, or one where attempts still hold resources, saying why', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      await expect(store.machineRemove({ machine: 'c1', now })).rejects.toThrow(/machine c1 is ready and in service/);
      const a = (await runOn(m.id)).applied[0]!;
      await start(a);
      await store.machineDrain({ machine: 'c1', now });
      const refused = store.machineRemove({ machine: 'c1', now });
      await expect(refused).rejects.toBeInstanceOf(ConflictError);
      await expect(refused).rejects.toThrow(/machine c1 is ready and draining, and 1 attempt there still holds resources/);
      expect(await machineEvents(m.id)).not.toContain('machine:removed');
      expect((await store.machineList()).map((x) => x.name)).toEqual(['c1']);
    });

    it('remove forgets a drained machine: gone from listings and the cluster, its attempts keep its name; its agent registering again brings it back', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1'), now });
      await store.machineRegister({ ...cpuMachine('c2'), now });
      const { job: j, applied } = await runOn(m.id);
      await start(applied[0]!);
      await finish(applied[0]!);
      await heartbeat(m.id, []);
      await store.machineDrain({ machine: 'c1', now });
      const r = await store.machineRemove({ machine: 'c1', now });
      expect([r.changed, r.machine.scheduling]).toEqual([true, 'removed']);
      expect((await store.machineList()).map((x) => x.name)).toEqual(['c2']);
      expect((await store.clusterView()).machines.map((x) => x.name)).toEqual(['c2']);
      expect(await store.machineFind({ machine: 'c1' })).toBeNull();
      expect((await store.machineGet({ machineId: m.id }))!.scheduling).toBe('removed');
      const attempt = (await store.jobGet({ jobId: j.id }))!.stages[0]!.attempts[0]!;
      expect([attempt.machineId, attempt.machineName]).toEqual([m.id, 'c1']);
      // Unknown to its agent and to the operator's verbs; never judged by the reconciler.
      await expect(heartbeat(m.id, [])).rejects.toBeInstanceOf(NotFoundError);
      await expect(store.machineUncordon({ machine: 'c1', now })).rejects.toBeInstanceOf(NotFoundError);
      await expect(store.machineRemove({ machine: 'c1', now })).rejects.toBeInstanceOf(NotFoundError);
      now += 60_000;
      await heartbeat((await store.machineFind({ machine: 'c2' }))!.id, []);
      expect((await reap()).machines).toEqual([]);
      // Its agent registers again: the same machine (by name), back in service and heartbeating.
      const back = await store.machineRegister({ ...cpuMachine('c1'), now });
      expect([back.id, back.health, back.scheduling]).toEqual([m.id, 'ready', 'eligible']);
      expect((await store.machineList()).map((x) => x.name)).toEqual(['c1', 'c2']);
      expect(await machineEvents(m.id)).toEqual(['machine:registered', 'machine:draining', 'machine:removed', 'machine:registered']);
    });

    it('remove forgets a lost machine in service, and a cordoned one with nothing on it', async () => {
      await store.machineRegister({ ...cpuMachine('lost-1'), now: now - 20_000 });
      await store.machineRegister({ ...cpuMachine('idle-1'), now });
      await reap();
      expect((await store.machineRemove({ machine: 'lost-1', now })).machine).toMatchObject({ health: 'lost', scheduling: 'removed' });
      await store.machineCordon({ machine: 'idle-1', now });
      expect((await store.machineRemove({ machine: 'idle-1', now })).changed).toBe(true);
      expect(await store.machineList()).toEqual([]);
    });
  });
}
