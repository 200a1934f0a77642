import { beforeEach, describe, expect, it } from 'vitest';
import { MachineLifecycle } from '../../autoscale/machine-lifecycle.js';
import type { Store } from '../store.js';
import { gpuMachine, job, stage } from './fixtures.js';

/**
 * The autoscaler's rows (issue 30, docs/autoscaling.md "The store"), as every adapter must keep
 * them: names, each lifecycle move and each refusal (machine-lifecycle.ts's table), the join when
 * an agent registers, release never while an attempt holds room, the idle clock read from the
 * attempts, holds, waits, and an event for each decision. Run inside storeConformance, whose hooks
 * open a fresh store for each test and close it.
 */
export function autoscaleConformance(storeOf: () => Store): void {
  describe('autoscaled machines', () => {
    let store: Store;
    let now: number;
    const LEASE = 10_000;
    beforeEach(() => {
      store = storeOf();
      now = 1_700_000_000_000;
    });

    const startOne = async (pool = 'h100', heldFor: string[] = []) =>
      (await store.autoscaleStart({ pool, heldFor: [heldFor], reason: `1 stage waits: starting 1 machine of template ${pool}`, now }))[0]!;
    const eventsOf = async (type: string) => (await store.eventsList({ limit: 1000 })).filter((e) => e.type === type);
    const lifecycleOf = async (name: string) => (await store.autoscaleRows({})).find((r) => r.name === name)?.lifecycle;
    /** A ready machine of the pool: started, answered, registered. */
    const joined = async (pool = 'h100', heldFor: string[] = []) => {
      const row = await startOne(pool, heldFor);
      await store.autoscaleRequested({ name: row.name, providerId: 'i-1', now });
      now += 12_000;
      const m = await store.machineRegister({ ...gpuMachine(row.name, 1), now });
      return { name: row.name, machineId: m.id };
    };
    /** A one-stage GPU job placed on the machine, as the planner would: its attempt. */
    const placeOn = async (machineId: string) => {
      const j = await store.jobSubmit({
        definition: job([stage('a', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] } } })]),
        source: null,
        now,
      });
      const r = await store.planApply({
        plan: { placements: [{ stageId: j.stages[0]!.id, machineId, gpuIndices: [0], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now,
        leaseMs: LEASE,
      });
      return r.applied[0]!;
    };

    it('names machines <pool>-<n>, past the highest the pool ever had and any name a machine has', async () => {
      const first = await store.autoscaleStart({ pool: 'h100', heldFor: [['s1'], []], reason: 'two wait', now });
      expect(first.map((r) => [r.name, r.pool, r.lifecycle, r.heldFor, r.startedAt, r.requestedAt, r.joinedAt, r.idleSince, r.attempts])).toEqual([
        ['h100-1', 'h100', 'provisioning', ['s1'], now, null, null, null, 0],
        ['h100-2', 'h100', 'provisioning', [], now, null, null, null, 0],
      ]);
      // A machine an operator named h100-3 keeps its name; released rows still count toward n.
      await store.machineRegister({ ...gpuMachine('h100-3', 1), now });
      await store.autoscaleFail({ name: 'h100-2', reason: 'did not join', now });
      await store.autoscaleRelease({ name: 'h100-2', reason: 'failed to join: releasing it', now });
      const next = await store.autoscaleStart({ pool: 'h100', heldFor: [[]], reason: 'one more', now });
      expect(next.map((r) => r.name)).toEqual(['h100-4']);
      // Another pool counts on its own.
      expect((await startOne('cpu')).name).toBe('cpu-1');
      expect(await store.autoscaleStart({ pool: 'h100', heldFor: [], reason: 'none', now })).toEqual([]);
      const starts = await eventsOf('autoscale:start');
      expect(starts).toHaveLength(3);
      expect(starts[0]).toMatchObject({ message: 'two wait (h100-1, h100-2)', data: { pool: 'h100', names: ['h100-1', 'h100-2'], to: 'provisioning' } });
      expect((await store.autoscaleRows({ pool: 'h100' })).map((r) => r.name)).toEqual(['h100-1', 'h100-2', 'h100-4']);
      // Started at one time: by name. h100-2 is released but its stop not confirmed: still active.
      expect((await store.autoscaleRows({ active: true })).map((r) => r.name)).toEqual(['cpu-1', 'h100-1', 'h100-2', 'h100-4']);
      await store.autoscaleStopped({ name: 'h100-2', now });
      expect((await store.autoscaleRows({ active: true })).map((r) => r.name)).toEqual(['cpu-1', 'h100-1', 'h100-4']);
    });

    it('provider answered: provisioning → joining, once; an agent registering makes it ready with its machine', async () => {
      const row = await startOne();
      const answered = await store.autoscaleRequested({ name: row.name, providerId: 'i-abc', now: now + 1000 });
      expect(answered.changed).toBe(true);
      expect(answered.row).toMatchObject({ lifecycle: 'joining', requestedAt: now + 1000, providerId: 'i-abc' });
      expect((await store.autoscaleRequested({ name: row.name, providerId: 'i-abc', now: now + 2000 })).changed).toBe(false);
      const m = await store.machineRegister({ ...gpuMachine(row.name, 1), now: now + 12_000 });
      const ready = (await store.autoscaleRows({}))[0]!;
      expect(ready).toMatchObject({ lifecycle: 'ready', joinedAt: now + 12_000, machineId: m.id, idleSince: now + 12_000, attempts: 0 });
      const [join] = await eventsOf('autoscale:joined');
      expect(join).toMatchObject({ machineId: m.id, message: `machine ${row.name} joined pool h100 after 12 s`, data: { from: 'joining', to: 'ready' } });
      // Registering again (an agent restart) changes nothing more.
      await store.machineRegister({ ...gpuMachine(row.name, 1), now: now + 20_000 });
      expect(await eventsOf('autoscale:joined')).toHaveLength(1);
      expect((await store.autoscaleRows({}))[0]!.joinedAt).toBe(now + 12_000);
    });

    it('an agent that registers before the answer is read: provisioning → ready, and the late answer keeps it ready', async () => {
      const row = await startOne();
      await store.machineRegister({ ...gpuMachine(row.name, 1), now });
      expect(await lifecycleOf(row.name)).toBe('ready');
      const late = await store.autoscaleRequested({ name: row.name, providerId: 'i-1', now });
      expect(late).toMatchObject({ changed: true, row: { lifecycle: 'ready', providerId: 'i-1' } });
    });

    it('a machine of no row, or of a failed row, registers as an ordinary machine', async () => {
      await store.machineRegister({ ...gpuMachine('plain', 1), now });
      const row = await startOne();
      await store.autoscaleFail({ name: row.name, reason: 'did not join within 600 s', now });
      await store.machineRegister({ ...gpuMachine(row.name, 1), now });
      expect(await lifecycleOf(row.name)).toBe('failed');
      expect(await eventsOf('autoscale:joined')).toEqual([]);
      expect((await store.machineList()).map((m) => m.name).sort()).toEqual([row.name, 'plain']);
    });

    it('a machine that never joins fails with its reason, then is released; a ready one cannot fail', async () => {
      const row = await startOne();
      const failed = await store.autoscaleFail({ name: row.name, reason: `${row.name} did not join within 600 s: failed, releasing it`, now });
      expect(failed).toMatchObject({ changed: true, row: { lifecycle: 'failed', failReason: `${row.name} did not join within 600 s: failed, releasing it` } });
      expect((await store.autoscaleFail({ name: row.name, reason: 'again', now })).changed).toBe(false);
      const [event] = await eventsOf('autoscale:fail');
      expect(event).toMatchObject({
        message: `machine ${row.name} did not join within 600 s: failed, releasing it`,
        machineId: null,
        data: { from: 'provisioning', to: 'failed' },
      });
      const released = await store.autoscaleRelease({ name: row.name, reason: 'failed to join: releasing it', now });
      expect(released).toMatchObject({ changed: true, row: { lifecycle: 'released', releasedAt: now } });
      expect((await store.autoscaleStopped({ name: row.name, now: now + 5 })).row.stoppedAt).toBe(now + 5);
      expect((await store.autoscaleStopped({ name: row.name, now: now + 6 })).changed).toBe(false);
      expect(await store.autoscaleRows({ active: true })).toEqual([]);

      const ready = await joined();
      expect((await store.autoscaleFail({ name: ready.name, reason: 'late', now })).changed).toBe(false);
    });

    it('drain cordons its machine; keep puts it back in service; release removes it; each refused out of turn', async () => {
      const { name, machineId } = await joined();
      // Out of turn: keep and release need draining, stopped needs released.
      expect((await store.autoscaleKeep({ name, reason: 'x', now })).changed).toBe(false);
      expect((await store.autoscaleRelease({ name, reason: 'x', now })).changed).toBe(false);
      expect((await store.autoscaleStopped({ name, now })).changed).toBe(false);

      const drained = await store.autoscaleDrain({ name, reason: `${name} idle 300 s: draining to release it`, now });
      expect(drained).toMatchObject({ changed: true, row: { lifecycle: 'draining', drainingAt: now } });
      expect((await store.machineGet({ machineId }))!.scheduling).toBe('draining');
      expect((await store.autoscaleDrain({ name, reason: 'again', now })).changed).toBe(false);
      const [drainEvent] = await eventsOf('autoscale:drain');
      expect(drainEvent).toMatchObject({
        machineId,
        message: `machine ${name} idle 300 s: draining to release it`,
        data: { pool: 'h100', name, from: 'ready', to: 'draining' },
      });

      const kept = await store.autoscaleKeep({ name, reason: `${name} has work again: back in service`, now });
      expect(kept).toMatchObject({ changed: true, row: { lifecycle: 'ready', drainingAt: null } });
      expect((await store.machineGet({ machineId }))!.scheduling).toBe('eligible');
      expect(await eventsOf('autoscale:keep')).toHaveLength(1);

      await store.autoscaleDrain({ name, reason: 'idle', now });
      const released = await store.autoscaleRelease({ name, reason: `${name} drained: releasing it`, now });
      expect(released).toMatchObject({ changed: true, row: { lifecycle: 'released', releasedAt: now } });
      expect(await store.machineList()).toEqual([]);
      expect((await eventsOf('machine:removed'))[0]).toMatchObject({ machineId });
      expect((await eventsOf('autoscale:release'))[0]).toMatchObject({
        message: `machine ${name} drained: releasing it`,
        data: { from: 'draining', to: 'released' },
      });
      // The end: nothing moves a released row but the provider's stop.
      for (const verb of ['autoscaleDrain', 'autoscaleKeep', 'autoscaleRelease', 'autoscaleFail'] as const)
        expect((await store[verb]({ name, reason: 'x', now })).changed).toBe(false);
    });

    it('an agent registering after its release takes no work: draining until its stop removes it', async () => {
      const { name, machineId } = await joined();
      await store.autoscaleDrain({ name, reason: 'idle', now });
      await store.autoscaleRelease({ name, reason: `${name} drained: releasing it`, now });
      // The provider is stopping it (a cloud's terminate takes a while); its agent, told by a
      // heartbeat that the removed machine is unknown, registers again meanwhile.
      now += 1000;
      const again = await store.machineRegister({ ...gpuMachine(name, 1), now });
      expect(again).toMatchObject({ id: machineId, scheduling: 'draining' });
      expect((await eventsOf('machine:draining')).at(-1)).toMatchObject({ machineId, message: expect.stringContaining('released by the autoscaler') });
      // So does the agent of a failed boot that came up after its release, registering for the first time.
      const late = await startOne();
      await store.autoscaleFail({ name: late.name, reason: 'did not join within 600 s', now });
      await store.autoscaleRelease({ name: late.name, reason: 'failed to join: releasing it', now });
      expect(await store.machineRegister({ ...gpuMachine(late.name, 1), now })).toMatchObject({ scheduling: 'draining' });
      expect(await lifecycleOf(late.name)).toBe('released');
      // Once the provider confirms the stops, the machines leave service again.
      await store.autoscaleStopped({ name, now });
      await store.autoscaleStopped({ name: late.name, now });
      expect(await store.machineList()).toEqual([]);
      expect((await eventsOf('machine:removed')).map((e) => e.message)).toContainEqual(expect.stringContaining('stopped by its provider'));
    });

    it('release is refused while an attempt holds room on the machine; the idle clock runs from its release', async () => {
      const { name, machineId } = await joined();
      const joinedAt = now;
      const a = await placeOn(machineId);
      expect((await store.autoscaleRows({}))[0]).toMatchObject({ attempts: 1, idleSince: null });
      // Placed before the cordon took: draining, and refused release while it holds room.
      await store.autoscaleDrain({ name, reason: 'idle', now });
      expect((await store.autoscaleRelease({ name, reason: 'drained', now })).changed).toBe(false);
      expect(await lifecycleOf(name)).toBe('draining');
      expect(await store.machineList()).toHaveLength(1);
      // The attempt ends and the agent stops listing it: its room is released.
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: LEASE });
      now += 60_000;
      await store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: [],
        now,
        jitter: 0,
      });
      await store.machineHeartbeat({ machineId, running: [], now, leaseMs: LEASE, missingAfterMs: 4000, jitter: 0 });
      const row = (await store.autoscaleRows({}))[0]!;
      expect(row).toMatchObject({ attempts: 0, idleSince: now });
      expect(row.idleSince).toBeGreaterThan(joinedAt);
      expect((await store.autoscaleRelease({ name, reason: 'drained', now })).changed).toBe(true);
    });

    it('holds: grow while starting or ready, read back only once ready with the stages still ready, cleared once', async () => {
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b'), stage('c')]), source: null, now });
      const [a, b, c] = j.stages.map((s) => s.id);
      const row = await startOne('h100', [a!]);
      const grown = await store.autoscaleHold({ name: row.name, stageIds: [a!, b!, c!], now });
      expect(grown).toMatchObject({ changed: true, row: { heldFor: [a, b, c] } });
      expect((await store.autoscaleHold({ name: row.name, stageIds: [b!], now })).changed).toBe(false);
      expect((await eventsOf('autoscale:hold'))[0]).toMatchObject({ data: { added: [b, c] } });
      // Not joined: nothing to place yet.
      expect(await store.autoscaleHeldStages({ now })).toEqual([]);
      const m = await store.machineRegister({ ...gpuMachine(row.name, 1), now });
      // Stage c no longer waits (placed elsewhere): left out.
      const other = await store.machineRegister({ ...gpuMachine('other', 1), now });
      await store.planApply({
        plan: { placements: [{ stageId: c!, machineId: other.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now,
        leaseMs: LEASE,
      });
      const held = await store.autoscaleHeldStages({ now });
      expect(held).toHaveLength(1);
      expect(held[0]!.name).toBe(row.name);
      expect(held[0]!.machineId).toBe(m.id);
      expect(held[0]!.stages.map((s) => [s.stageId, s.stageName, s.team, s.resources.cpuMillis])).toEqual([
        [a, 'a', 'default', 1000],
        [b, 'b', 'default', 1000],
      ]);
      expect((await store.autoscaleHoldClear({ name: row.name, now })).row.heldFor).toEqual([]);
      expect((await store.autoscaleHoldClear({ name: row.name, now })).changed).toBe(false);
      expect(await store.autoscaleHeldStages({ now })).toEqual([]);
      // A released machine's hold cannot grow.
      await store.autoscaleDrain({ name: row.name, reason: 'idle', now });
      expect((await store.autoscaleHold({ name: row.name, stageIds: [a!], now })).changed).toBe(false);
    });

    it('waits: replaced whole, first of each stage kept, read by stage', async () => {
      await store.autoscaleWaitsPut({
        waits: [
          { stageId: 's1', kind: 'at-max', reason: 'pool h100 is at its max 2', pool: 'h100' },
          { stageId: 's2', kind: 'too-big', reason: 'too big for any template', pool: null },
          { stageId: 's1', kind: 'quota', reason: 'a duplicate', pool: null },
        ],
        now,
      });
      expect(await store.autoscaleWaitOf({ stageId: 's1' })).toEqual({
        stageId: 's1',
        kind: 'at-max',
        reason: 'pool h100 is at its max 2',
        pool: 'h100',
        at: now,
      });
      expect(await store.autoscaleWaitOf({ stageId: 's2' })).toMatchObject({ kind: 'too-big', pool: null });
      await store.autoscaleWaitsPut({ waits: [{ stageId: 's3', kind: 'quota', reason: "team vision's quota stops it", pool: null }], now: now + 1 });
      expect(await store.autoscaleWaitOf({ stageId: 's1' })).toBeNull();
      expect(await store.autoscaleWaitOf({ stageId: 's3' })).toMatchObject({ kind: 'quota', at: now + 1 });
      const many = Array.from({ length: 1200 }, (_, i) => ({ stageId: `m${i}`, kind: 'at-max' as const, reason: 'at max', pool: 'h100' }));
      await store.autoscaleWaitsPut({ waits: many, now });
      expect(await store.autoscaleWaitOf({ stageId: 'm999' })).not.toBeNull();
      expect(await store.autoscaleWaitOf({ stageId: 'm1000' })).toBeNull();
    });

    it('an unknown name is NotFoundError; a deposed leader writes nothing', async () => {
      for (const verb of ['autoscaleDrain', 'autoscaleKeep', 'autoscaleRelease', 'autoscaleFail'] as const)
        await expect(store[verb]({ name: 'nope', reason: 'x', now })).rejects.toMatchObject({ name: 'NotFoundError' });
      await expect(store.autoscaleRequested({ name: 'nope', now })).rejects.toMatchObject({ name: 'NotFoundError' });
      await expect(store.autoscaleHold({ name: 'nope', stageIds: ['s'], now })).rejects.toMatchObject({ name: 'NotFoundError' });
      await expect(store.autoscaleHoldClear({ name: 'nope', now })).rejects.toMatchObject({ name: 'NotFoundError' });
      await expect(store.autoscaleStopped({ name: 'nope', now })).rejects.toMatchObject({ name: 'NotFoundError' });

      await store.leaderClaim({ holder: 'a', now, ttlMs: 5000 });
      await store.leaderClaim({ holder: 'b', now: now + 6000, ttlMs: 5000 });
      const late = store.asLeader(() => ({ holder: 'a', term: 1 }));
      await expect(late.autoscaleStart({ pool: 'h100', heldFor: [[]], reason: 'x', now: now + 6001 })).rejects.toMatchObject({ name: 'NotLeaderError' });
      await expect(late.autoscaleWaitsPut({ waits: [], now: now + 6001 })).rejects.toMatchObject({ name: 'NotLeaderError' });
      expect(await store.autoscaleRows({})).toEqual([]);
      const current = store.asLeader(() => ({ holder: 'b', term: 2 }));
      const [row] = await current.autoscaleStart({ pool: 'h100', heldFor: [[]], reason: 'x', now: now + 6001 });
      await expect(late.autoscaleFail({ name: row!.name, reason: 'x', now: now + 6002 })).rejects.toMatchObject({ name: 'NotLeaderError' });
      expect(await lifecycleOf(row!.name)).toBe(MachineLifecycle.provisioning);
    });
  });
}
