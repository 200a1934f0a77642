import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { Autoscaler, type AutoscaleLog, type JoinInfo } from './autoscale-loop.js';
import { parsePools } from './pool-template.js';
import { ProviderClosedError, type MachineProvider, type StartRequest } from './provider.js';

/** A provider that starts nothing real: it records what it was asked and answers as told. */
class RecordingProvider implements MachineProvider {
  starts: StartRequest[] = [];
  stops: string[][] = [];
  /** Names it leaves out of its answer (not started). */
  refuse = new Set<string>();
  async start(req: StartRequest) {
    this.starts.push(req);
    return req.names.filter((n) => !this.refuse.has(n)).map((name) => ({ name, providerId: `fake:${name}` }));
  }
  async stop(req: { pool: string; machines: { name: string; providerId: string | null }[] }) {
    this.stops.push(req.machines.map((m) => m.name));
    return req.machines.map((m) => m.name);
  }
  async close() {}
}

const quiet: AutoscaleLog = { info: () => {}, warn: () => {} };
const JOIN: JoinInfo = { server: 'http://127.0.0.1:1', joinToken: 'gantry_join_test' };
const pools = parsePools([
  {
    name: 'g',
    template: { cpu: 32, memory: '128Gi', gpus: { type: 'h100', count: 4 } },
    autoscale: { provider: 'command', command: '/bin/true', min: 0, max: 2, idleSeconds: 60, bootTimeoutSeconds: 30 },
  },
]);
const gpuStage = (name: string) => stage(name, { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 4, types: ['h100'] } } });

describe('Autoscaler: one pass, resumed from the database', () => {
  let store: Store;
  let now = 1_700_000_000_000;
  const clock = { now: () => now };
  let provider: RecordingProvider;
  const autoscaler = (join: () => Promise<JoinInfo> = async () => JOIN) =>
    new Autoscaler({ store, pools, providers: new Map([['g', provider]]), clock, intervalMs: 10_000, join, log: quiet });
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
    provider = new RecordingProvider();
  });
  afterEach(async () => {
    await store.close();
  });

  it('starts machines for what waits, asks the provider once, and counts them as supply while they join', async () => {
    await store.jobSubmit({ definition: job([gpuStage('a'), gpuStage('b')]), source: null, now });
    const a = autoscaler();
    const r = await a.pass();
    expect(r.decisions).toEqual([{ pool: 'g', action: 'start', names: ['g-1', 'g-2'], reason: expect.stringContaining('starting 2 machines of template g') }]);
    expect(provider.starts).toEqual([{ pool: 'g', template: pools[0]!.template, names: ['g-1', 'g-2'], ...JOIN }]);
    const rows = await store.autoscaleRows({ active: true });
    expect(rows.map((x) => [x.name, x.lifecycle, x.providerId, x.heldFor.length])).toEqual([
      ['g-1', 'joining', 'fake:g-1', 1],
      ['g-2', 'joining', 'fake:g-2', 1],
    ]);
    expect(r.pools).toEqual([{ pool: 'g', desired: 2, current: 0, starting: 2 }]);

    // One joins; the next passes start nothing more and ask the provider nothing again.
    now += 5000;
    await store.machineRegister({ ...gpuMachine('g-1', 4), now });
    now += 20_000;
    const again = await a.pass();
    expect(again.decisions).toEqual([]);
    expect(provider.starts).toHaveLength(1);
    expect(again.pools).toEqual([{ pool: 'g', desired: 2, current: 1, starting: 1 }]);
  });

  it('a gang (2 machines × 4 GPUs) starts a machine per member, each held for it', async () => {
    const gang = stage('g', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 4, types: ['h100'] }, machines: 2 } });
    const submitted = await store.jobSubmit({ definition: job([gang]), source: null, now });
    const id = submitted.stages[0]!.id;
    const r = await autoscaler().pass();
    expect(r.decisions).toEqual([
      {
        pool: 'g',
        action: 'start',
        names: ['g-1', 'g-2'],
        reason: '1 stage of team default waits for 2 machines × 4 h100 GPUs: starting 2 machines of template g',
      },
    ]);
    expect((await store.autoscaleRows({ active: true })).map((x) => [x.name, x.heldFor])).toEqual([
      ['g-1', [id]],
      ['g-2', [id]],
    ]);
  });

  it('after a restart between the decision and the provider, asks for the same names: no duplicate', async () => {
    await store.jobSubmit({ definition: job([gpuStage('a'), gpuStage('b')]), source: null, now });
    // The server dies after writing the rows, before the provider is asked.
    await expect(autoscaler(() => Promise.reject(new Error('killed'))).pass()).rejects.toThrow('killed');
    expect((await store.autoscaleRows({})).map((x) => [x.name, x.lifecycle, x.requestedAt])).toEqual([
      ['g-1', 'provisioning', null],
      ['g-2', 'provisioning', null],
    ]);
    expect(provider.starts).toEqual([]);
    // A new process: the rows are its memory.
    now += 1000;
    const r = await autoscaler().pass();
    expect(r.decisions).toEqual([]);
    expect(provider.starts.map((s) => s.names)).toEqual([['g-1', 'g-2']]);
    expect((await store.autoscaleRows({})).map((x) => [x.name, x.lifecycle])).toEqual([
      ['g-1', 'joining'],
      ['g-2', 'joining'],
    ]);
  });

  it("the local provider's machines, gone with the old process, are started again on a new process's first pass only", async () => {
    const local = parsePools([
      {
        name: 'g',
        template: { cpu: 32, memory: '128Gi', gpus: { type: 'h100', count: 4 } },
        autoscale: { provider: 'local', min: 0, max: 2, idleSeconds: 600, bootTimeoutSeconds: 30 },
      },
    ]);
    const make = () =>
      new Autoscaler({ store, pools: local, providers: new Map([['g', provider]]), clock, intervalMs: 10_000, join: async () => JOIN, log: quiet });
    await store.jobSubmit({ definition: job([gpuStage('a'), gpuStage('b')]), source: null, now });
    await make().pass();
    await store.machineRegister({ ...gpuMachine('g-1', 4), now });
    expect(provider.starts.map((s) => s.names)).toEqual([['g-1', 'g-2']]);
    // A new process: g-1 (ready) and g-2 (joining) are asked for again, by name; nothing new is decided.
    now += 1000;
    const restarted = make();
    expect((await restarted.pass()).decisions).toEqual([]);
    expect(provider.starts.map((s) => s.names)).toEqual([
      ['g-1', 'g-2'],
      ['g-1', 'g-2'],
    ]);
    now += 1000;
    await restarted.pass();
    expect(provider.starts).toHaveLength(2);
    expect((await store.autoscaleRows({})).map((r) => [r.name, r.lifecycle])).toEqual([
      ['g-1', 'ready'],
      ['g-2', 'joining'],
    ]);
  });

  it('fails a machine that does not join within its boot timeout, releases and stops it, and backs off', async () => {
    const waiting = await store.jobSubmit({ definition: job([gpuStage('a')]), source: null, now });
    const a = autoscaler();
    await a.pass();
    expect(provider.starts.map((s) => s.names)).toEqual([['g-1']]);
    now += 30_000;
    const failed = await a.pass();
    expect(failed.decisions).toEqual([{ pool: 'g', action: 'fail', names: ['g-1'], reason: 'g-1 did not join within 30 s: failed, releasing it' }]);
    expect((await store.autoscaleRows({}))[0]).toMatchObject({ lifecycle: 'failed', failReason: expect.stringContaining('did not join') });
    // The stage still waits, but the pool backs off (30 s after the first failure): no start.
    now += 10_000;
    const released = await a.pass();
    expect(released.decisions.map((d) => [d.action, d.names])).toEqual([
      ['release', ['g-1']],
      ['stop', ['g-1']],
    ]);
    expect(provider.stops).toEqual([['g-1']]);
    expect(await store.autoscaleWaitOf({ stageId: waiting.stages[0]!.id })).toMatchObject({ kind: 'backoff', pool: 'g' });
    // Past the backoff, a new machine of a new name.
    now += 21_000;
    const retried = await a.pass();
    expect(retried.decisions).toEqual([{ pool: 'g', action: 'start', names: ['g-2'], reason: expect.any(String) }]);
  });

  it('a start ended by the server stopping (the provider closed) fails nothing: the next process asks for the same names', async () => {
    await store.jobSubmit({ definition: job([gpuStage('a')]), source: null, now });
    const closing = new RecordingProvider();
    closing.start = async () => {
      throw new ProviderClosedError('./cloud.sh start was ended: the server is stopping (its process group was killed)');
    };
    const r = await new Autoscaler({
      store,
      pools,
      providers: new Map([['g', closing]]),
      clock,
      intervalMs: 10_000,
      join: async () => JOIN,
      log: quiet,
    }).pass();
    expect(r.decisions.map((d) => d.action)).toEqual(['start']);
    expect((await store.autoscaleRows({})).map((x) => [x.name, x.lifecycle, x.requestedAt, x.failReason])).toEqual([['g-1', 'provisioning', null, null]]);
    now += 1000;
    await autoscaler().pass();
    expect(provider.starts.map((s) => s.names)).toEqual([['g-1']]);
  });

  it('reads the whole history of rows (released ones pile up) once a pass, the rows not at their end otherwise', async () => {
    await store.jobSubmit({ definition: job([gpuStage('a')]), source: null, now });
    const full: string[] = [];
    const counting = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === 'autoscaleRows')
          return (p: { active?: boolean }) => {
            if (!p.active) full.push('all');
            return target.autoscaleRows(p);
          };
        const v: unknown = Reflect.get(target, prop, receiver);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const a = new Autoscaler({ store: counting, pools, providers: new Map([['g', provider]]), clock, intervalMs: 10_000, join: async () => JOIN, log: quiet });
    // A start (scale-up, the provider), then a failure, a release and a stop: every path of a pass.
    for (const step of [0, 30_000, 10_000]) {
      now += step;
      full.length = 0;
      await a.pass();
      expect(full).toEqual(['all']);
    }
    expect(provider.stops).toEqual([['g-1']]);
  });

  it('a machine the provider leaves out of its answer is failed with why', async () => {
    provider.refuse.add('g-1');
    await store.jobSubmit({ definition: job([gpuStage('a')]), source: null, now });
    const r = await autoscaler().pass();
    expect(r.decisions.map((d) => d.action)).toEqual(['start', 'fail']);
    expect((await store.autoscaleRows({}))[0]).toMatchObject({ lifecycle: 'failed', failReason: expect.stringContaining('did not start it') });
  });

  it('a lost machine is drained at once, and in its place one that answers is started for min', async () => {
    const minOne = parsePools([
      {
        name: 'g',
        template: { cpu: 32, memory: '128Gi', gpus: { type: 'h100', count: 4 } },
        autoscale: { provider: 'command', command: '/bin/true', min: 1, max: 1, idleSeconds: 60, bootTimeoutSeconds: 30 },
      },
    ]);
    const a = new Autoscaler({ store, pools: minOne, providers: new Map([['g', provider]]), clock, intervalMs: 10_000, join: async () => JOIN, log: quiet });
    await a.pass();
    await store.machineRegister({ ...gpuMachine('g-1', 4), now });
    now += 5000;
    expect((await a.pass()).decisions).toEqual([]);
    // Its heartbeats stop (a spot instance taken back): the reconciler finds it lost.
    now += 60_000;
    await store.machinesReap({ now, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0 });
    const r = await a.pass();
    expect(r.decisions.map((d) => [d.action, d.names])).toEqual([
      ['drain', ['g-1']],
      ['start', ['g-2']],
    ]);
    expect(r.decisions[0]!.reason).toContain('g-1 is lost');
  });

  it('drains and releases only machines idle for idleSeconds; a busy one stays', async () => {
    const busy = await store.jobSubmit({ definition: job([gpuStage('a')], { name: 'busy' }), source: null, now });
    const gone = await store.jobSubmit({ definition: job([gpuStage('b')], { name: 'gone' }), source: null, now });
    const a = autoscaler();
    await a.pass();
    const g1 = await store.machineRegister({ ...gpuMachine('g-1', 4), now });
    await store.machineRegister({ ...gpuMachine('g-2', 4), now });
    // One stage runs on g-1; the other's job is cancelled: g-2 has nothing to do.
    await store.planApply({
      plan: { placements: [{ stageId: busy.stages[0]!.id, machineId: g1.id, gpuIndices: [0, 1, 2, 3], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
      now,
      leaseMs: 600_000,
    });
    await store.jobCancel({ jobId: gone.id, now, reason: 'not needed' });
    // Not idle long enough yet.
    now += 30_000;
    expect((await a.pass()).decisions).toEqual([]);
    now += 31_000;
    const drained = await a.pass();
    expect(drained.decisions).toEqual([{ pool: 'g', action: 'drain', names: ['g-2'], reason: expect.stringContaining('g-2 idle') }]);
    now += 10_000;
    const released = await a.pass();
    expect(released.decisions.map((d) => [d.action, d.names])).toEqual([
      ['release', ['g-2']],
      ['stop', ['g-2']],
    ]);
    expect((await store.autoscaleRows({ active: true })).map((r) => [r.name, r.lifecycle])).toEqual([['g-1', 'ready']]);
  });
});
