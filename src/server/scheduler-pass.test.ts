import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cpuMachine, gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
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

  it('stops at maxPlacements and says there is more', async () => {
    await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 64_000 }), now });
    await store.jobSubmit({ definition: job(Array.from({ length: 10 }, (_, i) => stage(`s${i}`))), source: null, now });
    expect(await schedulerPass(store, clock, { leaseMs: 10_000, maxPlacements: 4 })).toMatchObject({ placed: 4, more: true });
    expect(await schedulerPass(store, clock, { leaseMs: 10_000, maxPlacements: 4 })).toMatchObject({ placed: 4, more: true });
    expect(await schedulerPass(store, clock, { leaseMs: 10_000, maxPlacements: 4 })).toMatchObject({ placed: 2, more: false });
  });
});
