import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { NatsBus } from '../bus/nats-bus.js';
import { Topic } from '../domain/topic.js';
import { cpuMachine, job, reportStarted, reportSucceeded, stage } from '../store/conformance/fixtures.js';
import type { KyselyStore } from '../store/kysely/kysely-store.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { PlacementSource } from '../store/store.js';
import { freshPostgresStore } from '../../test/support/fresh-postgres-store.js';
import { NATS_URL, POSTGRES_URL, serviceMissing } from '../../test/support/services.js';
import { failUpdatesWhen } from '../../test/support/update-triggers.js';
import { createControlPlane, type ControlPlane } from './control-plane.js';
import { databaseFile, defaultServerConfig } from './server-config.js';

/**
 * Which hints wake the scheduler loop (docs/scheduling.md, "Which hints wake the loop"): only
 * those no pass handled. A started control plane on each store, on an injected clock that never
 * moves, its loop's interval an hour: the loop runs once at the start, then only when kicked. The
 * kicks are counted (and do nothing, so that no pass of the loop's changes what the next step
 * finds); each step's messages are delivered by the time a few turns of the event loop have gone.
 */
const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const natsMissing = await serviceMissing('NATS', NATS_URL);

const settle = async () => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
};

const stores: { name: string; skip: string | null; postgres: boolean }[] = [
  { name: 'SQLite (one writer)', skip: null, postgres: false },
  { name: 'PostgreSQL (several writers: one replica, replicated all the same)', skip: pgMissing, postgres: true },
];

/** Where the store may be handed a pass of the test's around the control plane's (a gate that holds it). */
type Wrap = (pass: (source: PlacementSource) => Promise<boolean | void>) => (source: PlacementSource) => Promise<boolean | void>;

describe.each(stores)('the scheduler loop is woken only by hints no pass handled: $name', ({ skip, postgres }) => {
  let dir: string;
  let store: KyselyStore;
  let cp: ControlPlane | null;
  let kicks: MockInstance<() => void>;
  const now = 1_800_000_000_000;

  /** A started control plane on `store`; with `wrap`, the store runs the pass wrapped; with `busUrl`, its bus is NATS there. */
  const start = async (opts: { wrap?: Wrap; busUrl?: string } = {}) => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-wake-'));
    const config = defaultServerConfig({
      dataDir: dir,
      port: 0,
      host: '127.0.0.1',
      schedulerIntervalMs: 3_600_000,
      ...(opts.busUrl ? { busUrl: opts.busUrl } : {}),
    });
    store = postgres ? await freshPostgresStore('cp_wake') : await openSqliteStore(databaseFile(config));
    if (opts.wrap) {
      const wrap = opts.wrap;
      const install = store.placeBeforeCommit.bind(store);
      store.placeBeforeCommit = (pass, onError) => install(wrap(pass), onError);
    }
    cp = await createControlPlane(config, { store, clock: { now: () => now }, random: () => 0.5, logger: false });
    await cp.start();
    if (opts.busUrl) await (cp.bus as NatsBus).ready();
    // On PostgreSQL the pass before a commit runs on the leader only: wait for this replica to be it.
    for (let i = 0; postgres && i < 200 && !(await cp.app.inject({ url: '/healthz' })).json<{ leader?: boolean }>().leader; i++)
      await new Promise((r) => setTimeout(r, 10));
    // The loop's first pass, at the start, is over before the counting begins.
    await cp.loops.scheduler.runOnce();
    kicks = vi.spyOn(cp.loops.scheduler, 'kick').mockImplementation(() => {});
  };
  beforeEach((t) => {
    cp = null;
    if (skip) t.skip();
  });
  afterEach(async () => {
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const stageStates = async (jobId: string) => Object.fromEntries((await store.jobGet({ jobId }))!.stages.map((s) => [s.name, s.state]));

  /** A machine with room for one stage, and a job a → b with a placed on it and running (placed by the loop where the submit placed nothing). */
  const aRunning = async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    await settle();
    if ((await stageStates(j.id)).a === 'ready') await cp!.loops.scheduler.runOnce();
    const [a] = await store.machineAssignments({ machineId: m.id });
    expect(a?.stageName).toBe('a');
    await reportStarted(store, { machineId: m.id, attempt: a!, now });
    await settle();
    kicks.mockClear();
    return { m, j, a: a! };
  };

  it("a report whose own pass ran leaves the loop asleep: the next stage is placed in the report's transaction, and nothing kicks", async () => {
    await start();
    const { m, j, a } = await aRunning();
    const r = await reportSucceeded(store, { machineId: m.id, attempt: a, now });
    expect(r.completed[0]!.result).toBe('ok');
    await settle();
    expect(await stageStates(j.id)).toEqual({ a: 'succeeded', b: 'scheduled' });
    // Before: on PostgreSQL its pool:ready and capacity:freed each kicked the loop (2).
    expect(kicks).toHaveBeenCalledTimes(0);
  });

  it("a submit's hints wake it where its transaction places nothing (several writers); with one writer its own pass ran", async () => {
    await start();
    await store.machineRegister({ ...cpuMachine('m1'), now });
    await settle();
    kicks.mockClear();
    const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
    await settle();
    expect(await stageStates(j.id)).toEqual({ a: postgres ? 'ready' : 'scheduled' });
    expect(kicks.mock.calls.length > 0).toBe(postgres);
  });

  it('a pass that fails wakes it: its hints are not marked, and its error kicks', async () => {
    await start();
    const { m, j, a } = await aRunning();
    // b's claim (its stage written scheduled) fails: the pass is undone alone, the report stands.
    await failUpdatesWhen(store, postgres, 'stages', `new.state = 'scheduled'`);
    expect((await reportSucceeded(store, { machineId: m.id, attempt: a, now })).completed[0]!.result).toBe('ok');
    await settle();
    expect(await stageStates(j.id)).toEqual({ a: 'succeeded', b: 'ready' });
    // The error's kick, and the report's pool:ready and capacity:freed, not handled.
    expect(kicks).toHaveBeenCalledTimes(3);
  });

  it("a pass that stops at maxPlacements (`more`) wakes it for the rest, its transaction's hints with it", async () => {
    await start();
    // 1,001 stages ready and no machine; the machine that joins frees room for all of them, and
    // the pass before its registration's commit places the first 1,000.
    const stages = { resources: { cpuMillis: 10, memoryBytes: 2 ** 20, gpu: null } };
    await store.jobSubmitBatch({ definitions: Array.from({ length: 1001 }, () => job([stage('a', stages)])), now });
    await settle();
    kicks.mockClear();
    const m = await store.machineRegister({ ...cpuMachine('big', { cpuMillis: 64_000, memoryBytes: 64 * 2 ** 30 }), now });
    await settle();
    expect(await store.machineAssignments({ machineId: m.id })).toHaveLength(1000);
    // The pass's own kick, and the registration's capacity:freed, not handled.
    expect(kicks).toHaveBeenCalledTimes(2);
  }, 60_000);

  it.skipIf(!postgres)('a transaction that finds another pass running wakes it; the one whose pass ran does not', async () => {
    // Each pass the store runs first waits for the test's word.
    let entered!: () => void;
    const inPass = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    await start({
      wrap: (pass) => async (source) => {
        entered();
        await held;
        return pass(source);
      },
    });
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 2000 }), now });
    const x = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name: 'x' }), source: null, now });
    const y = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name: 'y' }), source: null, now });
    await cp!.loops.scheduler.runOnce();
    const placed = await store.machineAssignments({ machineId: m.id });
    expect(placed).toHaveLength(2);
    for (const p of placed) await reportStarted(store, { machineId: m.id, attempt: p, now });
    await settle();
    kicks.mockClear();
    const end = (jobId: string) => reportSucceeded(store, { machineId: m.id, attempt: placed.find((p) => p.jobId === jobId)!, now });
    const first = end(x.id);
    await inPass;
    // The second commits while the first's pass is held, with no pass of its own: its two hints kick.
    expect((await end(y.id)).completed[0]!.result).toBe('ok');
    await settle();
    expect(kicks).toHaveBeenCalledTimes(2);
    release();
    expect((await first).completed[0]!.result).toBe('ok');
    await settle();
    // x's b placed by it (and y's too where the two conflicted and the first ran again, seeing it).
    expect(await stageStates(x.id)).toEqual({ a: 'succeeded', b: 'scheduled' });
    // The first's pass ran to its end: its hints kicked nothing more.
    expect(kicks).toHaveBeenCalledTimes(2);
  });

  it.skipIf(!postgres || natsMissing !== null)(
    "over NATS: another replica's hints wake it; this replica's own, handed to it at the publish after a pass handled them, do not",
    async () => {
      await start({ busUrl: NATS_URL });
      const other = new NatsBus(NatsBus.servers(NATS_URL), { installation: await store.installationId() });
      try {
        await other.ready();
        const { m, j, a } = await aRunning();
        expect((await reportSucceeded(store, { machineId: m.id, attempt: a, now })).completed[0]!.result).toBe('ok');
        await settle();
        expect(await stageStates(j.id)).toEqual({ b: 'scheduled', a: 'succeeded' });
        expect(kicks).toHaveBeenCalledTimes(0);
        // Another replica's report: its messages come from the wire, with ids no pass here handled.
        await other.publishBatch({
          id: 'another-replica-1',
          messages: [
            { topic: Topic.capacityFreed, payload: { machineId: m.id } },
            { topic: Topic.poolReady, payload: { pool: 'cpu' } },
          ],
        });
        for (let i = 0; i < 200 && kicks.mock.calls.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
        expect(kicks).toHaveBeenCalledTimes(2);
      } finally {
        await other.close();
      }
    },
  );
});
