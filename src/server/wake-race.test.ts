import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it, vi } from 'vitest';
import { cpuMachine, job, reportStarted, reportSucceeded, stage } from '../store/conformance/fixtures.js';
import type { KyselyStore } from '../store/kysely/kysely-store.js';
import { freshPostgresStore } from '../../test/support/fresh-postgres-store.js';
import { createControlPlane, type ControlPlane } from './control-plane.js';
import { defaultServerConfig } from './server-config.js';

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};
let cp: ControlPlane | null = null;
let dir = '';
afterEach(async () => {
  await cp?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

it('a handled pool:ready whose pass did not see a concurrent capacity:freed, and a loop pass between: its hints still wake the loop', async () => {
  const now = 1_800_000_000_000;
  dir = mkdtempSync(join(tmpdir(), 'gantry-wake-race-'));
  const config = defaultServerConfig({ dataDir: dir, port: 0, host: '127.0.0.1', schedulerIntervalMs: 3_600_000 });
  const store: KyselyStore = await freshPostgresStore('cp_wake_race');
  let holdNext = false;
  let entered!: () => void;
  const inPass = new Promise<void>((r) => (entered = r));
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const install = store.placeBeforeCommit.bind(store);
  store.placeBeforeCommit = (pass, onError) =>
    install(async (source) => {
      if (holdNext) {
        holdNext = false;
        entered();
        await held;
      }
      return pass(source);
    }, onError);
  cp = await createControlPlane(config, { store, clock: { now: () => now }, random: () => 0.5, logger: false });
  await cp.start();
  for (let i = 0; i < 200 && !(await cp.app.inject({ url: '/healthz' })).json<{ leader?: boolean }>().leader; i++) await new Promise((r) => setTimeout(r, 10));
  await cp.loops.scheduler.runOnce();
  const kicks = vi.spyOn(cp.loops.scheduler, 'kick').mockImplementation(() => {});
  // m1: room 2000, runs y.a. m2: room 1000, runs x.a. x.b needs 2000: it fits m1 only.
  const m1 = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 2000 }), now });
  const y = await store.jobSubmit({
    definition: job([stage('a', { resources: { cpuMillis: 2000, memoryBytes: 2 ** 28, gpu: null } })], { name: 'y' }),
    source: null,
    now,
  });
  await cp.loops.scheduler.runOnce();
  const m2 = await store.machineRegister({ ...cpuMachine('m2', { cpuMillis: 1000 }), now });
  const x = await store.jobSubmit({
    definition: job([stage('a'), stage('b', { needs: ['a'], resources: { cpuMillis: 2000, memoryBytes: 2 ** 28, gpu: null } })], { name: 'x' }),
    source: null,
    now,
  });
  await cp.loops.scheduler.runOnce();
  const [ya] = await store.machineAssignments({ machineId: m1.id });
  const [xa] = await store.machineAssignments({ machineId: m2.id });
  expect([ya?.jobId, xa?.jobId]).toEqual([y.id, x.id]);
  await reportStarted(store, { machineId: m1.id, attempt: ya!, now });
  await reportStarted(store, { machineId: m2.id, attempt: xa!, now });
  await settle();
  kicks.mockClear();

  // A: x.a ends on m2, readying x.b (too big for m2; m1 busy). Its pass is held (its snapshot is taken).
  holdNext = true;
  const A = reportSucceeded(store, { machineId: m2.id, attempt: xa!, now });
  await inPass;
  // B: y.a ends on m1 (2000 free) and commits while A's pass is held: no pass of its own, its hints kick.
  expect((await reportSucceeded(store, { machineId: m1.id, attempt: ya!, now })).completed[0]!.result).toBe('ok');
  await settle();
  const kicksByB = kicks.mock.calls.length;
  // The pass B's kick starts, before A commits: it sees m1 free and nothing ready.
  await cp.loops.scheduler.runOnce();
  release();
  expect((await A).completed[0]!.result).toBe('ok');
  await settle();
  const state = Object.fromEntries((await store.jobGet({ jobId: x.id }))!.stages.map((s) => [s.name, s.state]));
  // x.b ready and m1 free: neither pass saw both. A's hints must wake the loop (main 40a3da4: 0 kicks, x.b waits for the interval).
  expect(state).toEqual({ a: 'succeeded', b: 'ready' });
  expect(kicks.mock.calls.length - kicksByB).toBeGreaterThan(0);
  await cp.loops.scheduler.runOnce();
  expect((await store.machineAssignments({ machineId: m1.id })).map((a) => a.stageName)).toEqual(['b']);
}, 60_000);
