import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cpuMachine, gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { PlacementSource, Store } from '../store/store.js';
import { schedulerPass } from './scheduler-pass.js';

describe('schedulerPass', () => {
  let store: Store;
  let now = 1_700_000_000_000;
  const clock = { now: () => now };
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('reads a queue only as deep as the free room could take, however long it is', async () => {
    await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 3000 }), now });
    // 500 stages of one shape (1 CPU each): room for 3.
    await store.jobSubmit({ definition: job(Array.from({ length: 500 }, (_, i) => stage(`s${i}`))), source: null, now });
    const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
    expect(r).toEqual({ placed: 3, skipped: 0, read: 3, more: false });
    // Full: the next pass reads nothing at all.
    expect(await schedulerPass(store, clock, { leaseMs: 10_000 })).toEqual({ placed: 0, skipped: 0, read: 0, more: false });
  });

  it('a wall of stages no machine can run costs nothing and hides nothing', async () => {
    await store.machineRegister({ ...cpuMachine('c1'), now });
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    const nowhere = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['tpu9'] } };
    for (let j = 0; j < 5; j++) {
      await store.jobSubmit({
        definition: job(
          Array.from({ length: 200 }, (_, i) => stage(`x${i}`, { resources: nowhere })),
          { name: `wall-${j}` },
        ),
        source: null,
        now,
      });
    }
    now += 1;
    const fine = await store.jobSubmit({ definition: job([stage('ok')]), source: null, now });
    const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
    expect(r).toEqual({ placed: 1, skipped: 0, read: 1, more: false });
    expect((await store.jobGet({ jobId: fine.id }))!.stages[0]!.state).toBe('scheduled');
  });

  it('places in priority order across shapes, and a higher-priority larger shape first', async () => {
    await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 4000 }), now });
    const small = await store.jobSubmit({ definition: job([stage('s1'), stage('s2'), stage('s3')], { name: 'small', priority: 10 }), source: null, now });
    now += 1;
    const big = await store.jobSubmit({
      definition: job([stage('b', { resources: { cpuMillis: 3000, memoryBytes: 2 ** 20, gpu: null } })], { name: 'big', priority: 90 }),
      source: null,
      now,
    });
    const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
    expect(r.placed).toBe(2);
    expect((await store.jobGet({ jobId: big.id }))!.stages[0]!.state).toBe('scheduled');
    expect((await store.jobGet({ jobId: small.id }))!.stages.filter((s) => s.state === 'scheduled')).toHaveLength(1);
  });

  it('backfills a held machine with work whose time limit ends before the large stage could start, nothing else', async () => {
    await store.machineRegister({ ...gpuMachine('g1', 4), now });
    const gpu = (count: number) => ({ cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count, types: ['h100'] } });
    // Two GPUs held by work that must end within 100 s.
    const first = await store.jobSubmit({
      definition: job([stage('run', { resources: gpu(2), timeoutSeconds: 100 })], { name: 'first', priority: 50 }),
      source: null,
      now,
    });
    expect((await schedulerPass(store, clock, { leaseMs: 10_000 })).placed).toBe(1);
    const a = (await store.jobGet({ jobId: first.id }))!.stages[0]!.attempts[0]!;
    await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: 10_000 });
    now += 1;
    const big = await store.jobSubmit({ definition: job([stage('train', { resources: gpu(4) })], { name: 'big', priority: 50 }), source: null, now });
    now += 1;
    const short = await store.jobSubmit({
      definition: job([stage('s', { resources: gpu(1), timeoutSeconds: 30 })], { name: 'short', priority: 10 }),
      source: null,
      now,
    });
    const endless = await store.jobSubmit({ definition: job([stage('e', { resources: gpu(1) })], { name: 'endless', priority: 10 }), source: null, now });
    const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
    expect(r.placed).toBe(1);
    const state = async (id: string) => (await store.jobGet({ jobId: id }))!.stages[0]!.state;
    expect(await state(short.id)).toBe('scheduled');
    expect(await state(endless.id)).toBe('ready');
    expect(await state(big.id)).toBe('ready');
  });

  describe('holds (the autoscaler started a machine for these stages)', () => {
    const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 20, gpu: { count: 1, types: ['h100'] } };
    /** A low-priority GPU stage, a 1-GPU machine started for it and joined, then a higher-priority GPU stage. */
    const setUp = async () => {
      const low = await store.jobSubmit({ definition: job([stage('low', { resources: gpu })], { name: 'low', priority: 10 }), source: null, now });
      const [row] = await store.autoscaleStart({ pool: 'h100', heldFor: [[low.stages[0]!.id]], reason: '1 stage waits', now });
      now += 60_000;
      const high = await store.jobSubmit({ definition: job([stage('high', { resources: gpu })], { name: 'high', priority: 90 }), source: null, now });
      const m = await store.machineRegister({ ...gpuMachine(row!.name, 1), now });
      return { low, high, name: row!.name, machineId: m.id };
    };
    const stateOf = async (jobId: string) => (await store.jobGet({ jobId }))!.stages[0]!.state;
    const heldFor = async (name: string) => (await store.autoscaleRows({})).find((r) => r.name === name)!.heldFor;

    it('a joined machine takes the stage it was started for, not a higher-priority one that came later; the hold is cleared', async () => {
      const { low, high, name, machineId } = await setUp();
      expect(await schedulerPass(store, clock, { leaseMs: 10_000, holds: true })).toMatchObject({ placed: 1, skipped: 0 });
      expect(await stateOf(low.id)).toBe('scheduled');
      expect(await stateOf(high.id)).toBe('ready');
      expect((await store.jobGet({ jobId: low.id }))!.stages[0]!.attempts[0]!.machineId).toBe(machineId);
      expect(await heldFor(name)).toEqual([]);
    });

    it('in the transaction of the join itself (one writer): the registering machine takes its held stage in that commit', async () => {
      const low = await store.jobSubmit({ definition: job([stage('low', { resources: gpu })], { name: 'low', priority: 10 }), source: null, now });
      const [row] = await store.autoscaleStart({ pool: 'h100', heldFor: [[low.stages[0]!.id]], reason: '1 stage waits', now });
      const errors: unknown[] = [];
      expect(
        store.placeBeforeCommit(
          (source) => schedulerPass(source, clock, { leaseMs: 10_000, holds: true }).then(() => {}),
          (err) => errors.push(err),
        ),
      ).toBe(true);
      now += 60_000;
      const high = await store.jobSubmit({ definition: job([stage('high', { resources: gpu })], { name: 'high', priority: 90 }), source: null, now });
      await store.machineRegister({ ...gpuMachine(row!.name, 1), now });
      expect(errors).toEqual([]);
      expect(await stateOf(low.id)).toBe('scheduled');
      expect(await stateOf(high.id)).toBe('ready');
      expect(await heldFor(row!.name)).toEqual([]);
    });

    it('without holds the pass reads none, and priority decides (what holds are for)', async () => {
      const { low, high, name } = await setUp();
      const source: PlacementSource = {
        clusterView: () => store.clusterView(),
        readyShapes: (p) => store.readyShapes(p),
        queueHeads: (p) => store.queueHeads(p),
        planApply: (p) => store.planApply(p),
        schedulerTeams: (p) => store.schedulerTeams(p),
        preemptionView: () => store.preemptionView(),
        heldUntil: (p) => store.heldUntil(p),
        autoscaleHeldStages: () => Promise.reject(new Error('read without holds')),
        autoscaleHoldClear: () => Promise.reject(new Error('written without holds')),
      };
      expect(await schedulerPass(source, clock, { leaseMs: 10_000 })).toMatchObject({ placed: 1 });
      expect(await stateOf(high.id)).toBe('scheduled');
      expect(await stateOf(low.id)).toBe('ready');
      expect(await heldFor(name)).toHaveLength(1);
    });

    it('a gang held on two starting machines: the first to join is kept for it (not given to a later stage), both take it once joined', async () => {
      const gang = await store.jobSubmit({
        definition: job([stage('train', { resources: { ...gpu, machines: 2 } })], { name: 'gang', priority: 10 }),
        source: null,
        now,
      });
      const id = gang.stages[0]!.id;
      const [a, b] = await store.autoscaleStart({ pool: 'h100', heldFor: [[id], [id]], reason: 'a gang of 2 waits', now });
      now += 60_000;
      const high = await store.jobSubmit({ definition: job([stage('high', { resources: gpu })], { name: 'high', priority: 90 }), source: null, now });
      await store.machineRegister({ ...gpuMachine(a!.name, 1), now });
      expect(await schedulerPass(store, clock, { leaseMs: 10_000, holds: true })).toMatchObject({ placed: 0 });
      expect(await stateOf(high.id)).toBe('ready');
      expect(await heldFor(a!.name)).toEqual([id]);
      await store.machineRegister({ ...gpuMachine(b!.name, 1), now });
      // Two attempts: one per member.
      expect(await schedulerPass(store, clock, { leaseMs: 10_000, holds: true })).toMatchObject({ placed: 2 });
      expect(await stateOf(gang.id)).toBe('scheduled');
      expect(new Set((await store.jobGet({ jobId: gang.id }))!.stages[0]!.attempts.map((x) => x.machineName))).toEqual(new Set([a!.name, b!.name]));
      expect(await heldFor(a!.name)).toEqual([]);
      expect(await heldFor(b!.name)).toEqual([]);
      expect(await stateOf(high.id)).toBe('ready');
    });

    it('a held stage no longer ready is dropped: the hold is cleared and the machine goes to the queue', async () => {
      const { low, high, name } = await setUp();
      await store.jobCancel({ jobId: low.id, reason: 'not needed', now });
      expect(await store.autoscaleHeldStages({ now })).toEqual([{ name, machineId: expect.any(String), stages: [] }]);
      expect(await schedulerPass(store, clock, { leaseMs: 10_000, holds: true })).toMatchObject({ placed: 1 });
      expect(await stateOf(high.id)).toBe('scheduled');
      expect(await heldFor(name)).toEqual([]);
    });
  });

  describe('gangs (docs/gangs.md)', () => {
    const gpu = (count: number, machines?: number) => ({
      cpuMillis: 1000,
      memoryBytes: 2 ** 20,
      gpu: { count, types: ['h100'] },
      ...(machines ? { machines } : {}),
    });
    const stateOf = async (jobId: string) => (await store.jobGet({ jobId }))!.stages[0]!.state;
    /** Places and starts what the pass places now. */
    const placeAndStart = async () => {
      const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
      for (const m of (await store.clusterView()).machines)
        for (const a of await store.machineAssignments({ machineId: m.id }))
          await store.attemptStart({ attemptId: a.attemptId, token: a.token, pid: 1, now, leaseMs: 10_000 });
      return r;
    };

    it('a gang of 1-GPU members on a full cluster is read and held its set (before: no member fits, so its queue was not read at all)', async () => {
      await store.machineRegister({ ...gpuMachine('g1', 1), now });
      await store.machineRegister({ ...gpuMachine('g2', 1), now });
      await store.jobSubmit({ definition: job([stage('a', { resources: gpu(1) }), stage('b', { resources: gpu(1) })], { name: 'busy' }), source: null, now });
      expect((await placeAndStart()).placed).toBe(2);
      now += 1;
      const gang = await store.jobSubmit({ definition: job([stage('train', { resources: gpu(1, 2) })], { name: 'gang' }), source: null, now });
      const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
      expect(r).toEqual({ placed: 0, skipped: 0, read: 1, more: false, gangHeldGpus: 2 });
      expect(await stateOf(gang.id)).toBe('ready');
    });

    it('reads a gang shape as deep as whole gangs fit: 4 free machines take 2 gangs of 2, not 4', async () => {
      for (const n of ['g1', 'g2', 'g3', 'g4']) await store.machineRegister({ ...gpuMachine(n, 1), now });
      await store.jobSubmit({
        definition: job(Array.from({ length: 6 }, (_, i) => stage(`t${i}`, { resources: gpu(1, 2) }))),
        source: null,
        now,
      });
      expect(await schedulerPass(store, clock, { leaseMs: 10_000 })).toEqual({ placed: 4, skipped: 0, read: 2, more: false });
    });

    it("backfills a gang's held machines only with work that ends before the gang's start: the latest of its machines' (members of another gang running there, with their time limit)", async () => {
      await store.machineRegister({ ...gpuMachine('g1', 2), now });
      await store.machineRegister({ ...gpuMachine('g2', 2), now });
      // A gang of 2 × 1 GPU that must end within 100 s runs on both machines, one member each.
      const first = await store.jobSubmit({
        definition: job([stage('a', { resources: gpu(1, 2), timeoutSeconds: 100 })], { name: 'first' }),
        source: null,
        now,
      });
      expect((await placeAndStart()).placed).toBe(2);
      // g2 also runs a stage that must end within 300 s: the gang behind waits for it too.
      await store.jobSubmit({ definition: job([stage('late', { resources: gpu(1), timeoutSeconds: 300 })], { name: 'late' }), source: null, now });
      expect((await placeAndStart()).placed).toBe(1);
      expect(await stateOf(first.id)).toBe('running');
      now += 1000;
      // A gang of 2 × 2 GPUs waits for both machines: held, its start the later of the two (300 s after the start, on the machine that runs `late`).
      const big = await store.jobSubmit({ definition: job([stage('train', { resources: gpu(2, 2) })], { name: 'big', priority: 90 }), source: null, now });
      now += 1;
      const fits = await store.jobSubmit({
        definition: job([stage('s', { resources: gpu(1), timeoutSeconds: 250 })], { name: 'fits', priority: 10 }),
        source: null,
        now,
      });
      // Of another shape (2 CPUs), so that both are read: the free room is one GPU.
      const long = await store.jobSubmit({
        definition: job([stage('s', { resources: { ...gpu(1), cpuMillis: 2000 }, timeoutSeconds: 310 })], { name: 'long', priority: 10 }),
        source: null,
        now,
      });
      const r = await schedulerPass(store, clock, { leaseMs: 10_000 });
      expect(r).toMatchObject({ placed: 1, gangHeldGpus: 4 });
      expect(await stateOf(fits.id)).toBe('scheduled');
      expect(await stateOf(long.id)).toBe('ready');
      expect(await stateOf(big.id)).toBe('ready');
    });
  });

  it('stops at maxPlacements and says there is more', async () => {
    await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 64_000 }), now });
    await store.jobSubmit({ definition: job(Array.from({ length: 10 }, (_, i) => stage(`s${i}`))), source: null, now });
    expect(await schedulerPass(store, clock, { leaseMs: 10_000, maxPlacements: 4 })).toMatchObject({ placed: 4, more: true });
    expect(await schedulerPass(store, clock, { leaseMs: 10_000, maxPlacements: 4 })).toMatchObject({ placed: 4, more: true });
    expect(await schedulerPass(store, clock, { leaseMs: 10_000, maxPlacements: 4 })).toMatchObject({ placed: 2, more: false });
  });
});
