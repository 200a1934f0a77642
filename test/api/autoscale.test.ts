import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePools } from '../../src/autoscale/pool-template.js';
import { createControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine, gpuMachine } from '../../src/store/conformance/fixtures.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';

/**
 * What the operator sees of the autoscaler through the API (issue 30): GET /v1/autoscale, the
 * machine views' pool and lifecycle, and explain's word on a waiting stage. Rows are made with the
 * store's verbs, one machine in each lifecycle; no provider runs and the control plane is not started.
 */
const pools = parsePools([
  {
    name: 'h100',
    template: { cpu: 32, memory: '256Gi', gpus: { type: 'h100', count: 8 } },
    autoscale: { provider: 'local', min: 0, max: 6, idleSeconds: 300, bootTimeoutSeconds: 600 },
  },
  {
    name: 'cpu',
    template: { cpu: 16, memory: '64Gi' },
    autoscale: { provider: 'command', command: './up.sh', min: 0, max: 20, idleSeconds: 120, bootTimeoutSeconds: 300 },
  },
]);

async function server(withPools: boolean) {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-autoscale-api-'));
  const cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0, pools: withPools ? pools : [] }));
  const auth = bearer(await makeToken(cp.store, 'admin'));
  return {
    cp,
    auth,
    get: (url: string, headers: Record<string, string> = auth) => cp.app.inject({ method: 'GET', url, headers }),
    submit: async (stages: object[]) => {
      const r = await cp.app.inject({
        method: 'POST',
        url: '/v1/jobs',
        headers: { ...auth, 'content-type': 'application/json' },
        payload: JSON.stringify({ name: 'x', stages }),
      });
      expect(r.statusCode).toBe(201);
      const id = r.json().id as string;
      return { id, stageIds: (await cp.store.jobGet({ jobId: id }))!.stages.map((s) => s.id) };
    },
    close: async () => {
      await cp.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const gpuStage = (name: string, type = 'h100') => ({ name, resources: { cpu: 4, memory: '8Gi', gpu: { count: 8, type } }, command: ['true'] });

describe('autoscale API, no pool configured', () => {
  let s: Awaited<ReturnType<typeof server>>;
  beforeAll(async () => (s = await server(false)));
  afterAll(() => s.close());

  it('GET /v1/autoscale: no pools, and a note that says no pool is autoscaled', async () => {
    const r = await s.get('/v1/autoscale');
    expect(r.statusCode).toBe(200);
    const v = r.json();
    expect(v).toMatchObject({ pools: [], machines: [], decisions: [] });
    expect(v.note).toMatch(/^no pool is autoscaled: declare one in the cluster file’s pools: section/);
  });

  it("needs a person's token: any team's reads it (machines and counts, as GET /v1/pools), a join token is refused", async () => {
    expect((await s.get('/v1/autoscale', {})).statusCode).toBe(401);
    expect((await s.get('/v1/autoscale', bearer(await makeToken(s.cp.store, 'team', { team: 'vision' })))).statusCode).toBe(200);
    expect((await s.get('/v1/autoscale', bearer(await makeToken(s.cp.store, 'join')))).statusCode).toBe(403);
  });

  it('machine views and explain carry nothing of the autoscaler', async () => {
    await registerMachine(s.cp.store, cpuMachine('cpu-1'));
    const m = (await s.get('/v1/machines')).json().machines[0];
    expect(m.name).toBe('cpu-1');
    expect(m).not.toHaveProperty('pool');
    expect(m).not.toHaveProperty('lifecycle');
    const job = await s.submit([gpuStage('train')]);
    const e = (await s.get(`/v1/jobs/${job.id}/stages/train/explain`)).json();
    expect(e.reason).toMatch(/^no ready machine can run it/);
    expect(e.autoscale).toBeNull();
  });
});

describe('autoscale API, pools configured', () => {
  let s: Awaited<ReturnType<typeof server>>;
  let held: { id: string; stageIds: string[] };
  beforeAll(async () => {
    s = await server(true);
    await registerMachine(s.cp.store, cpuMachine('static-1'));
    held = await s.submit([gpuStage('train')]);
    const store = s.cp.store;
    const now = () => Date.now();
    // h100-1 provisioning (held for the stage), h100-2 joining, h100-3 ready, h100-4 draining, h100-5 failed, h100-6 released.
    const started = await store.autoscaleStart({
      pool: 'h100',
      heldFor: [[held.stageIds[0]!], [], [], [], [], []],
      reason: '1 stage waits for 8 h100 GPUs: starting 6 machines of template h100',
      now: now(),
    });
    expect(started.map((r) => r.name)).toEqual(['h100-1', 'h100-2', 'h100-3', 'h100-4', 'h100-5', 'h100-6']);
    for (const name of ['h100-2', 'h100-3', 'h100-4'])
      expect((await store.autoscaleRequested({ name, providerId: `local:${name}`, now: now() })).changed).toBe(true);
    await registerMachine(store, gpuMachine('h100-3', 8));
    await registerMachine(store, gpuMachine('h100-4', 8));
    expect((await store.autoscaleDrain({ name: 'h100-4', reason: 'idle 300 s: draining to release it', now: now() })).changed).toBe(true);
    expect((await store.autoscaleFail({ name: 'h100-5', reason: 'did not join within 600 s', now: now() })).changed).toBe(true);
    expect((await store.autoscaleFail({ name: 'h100-6', reason: 'did not join within 600 s', now: now() })).changed).toBe(true);
    expect((await store.autoscaleRelease({ name: 'h100-6', reason: 'failed: released', now: now() })).changed).toBe(true);
  });
  afterAll(() => s.close());

  it('GET /v1/autoscale: each pool with its machines counted by lifecycle, desired / current / starting', async () => {
    const v = (await s.get('/v1/autoscale')).json();
    expect(v.note).toBeUndefined();
    expect(v.pools.map((p: { name: string }) => p.name)).toEqual(['h100', 'cpu']);
    expect(v.pools[0]).toEqual({
      name: 'h100',
      template: {
        cpuMillis: 32_000,
        memoryBytes: 256 * 2 ** 30,
        gpus: { type: 'h100', count: 8 },
        region: null,
        labels: {},
        description: '8 × h100, 32 CPU, 256Gi',
      },
      provider: 'local',
      min: 0,
      max: 6,
      idleSeconds: 300,
      bootTimeoutSeconds: 600,
      spareMachines: 0,
      maxStartsPerInterval: null,
      machines: { provisioning: 1, joining: 1, ready: 1, draining: 1, failed: 1 },
      desired: 3,
      current: 1,
      starting: 2,
    });
    expect(v.pools[1]).toMatchObject({ name: 'cpu', provider: 'command', desired: 0, current: 0, starting: 0 });
  });

  it('lists the machines (a released one for the hour after) and the decisions newest first, with their reasons', async () => {
    const v = (await s.get('/v1/autoscale')).json();
    expect(v.machines.map((m: { name: string; lifecycle: string }) => `${m.name} ${m.lifecycle}`)).toEqual([
      'h100-1 provisioning',
      'h100-2 joining',
      'h100-3 ready',
      'h100-4 draining',
      'h100-5 failed',
      'h100-6 released',
    ]);
    expect(v.machines[0].heldFor).toEqual([held.stageIds[0]]);
    expect(v.machines[4].failReason).toBe('did not join within 600 s');
    const types = v.decisions.map((d: { type: string }) => d.type);
    expect(types[0]).toBe('autoscale:release');
    expect(types.at(-1)).toBe('autoscale:start');
    expect(new Set(types)).toEqual(
      new Set(['autoscale:start', 'autoscale:requested', 'autoscale:joined', 'autoscale:drain', 'autoscale:fail', 'autoscale:release']),
    );
    const seqs = v.decisions.map((d: { seq: number }) => d.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => b - a));
    const drain = v.decisions.find((d: { type: string }) => d.type === 'autoscale:drain');
    expect(drain).toMatchObject({ pool: 'h100', machine: 'h100-4' });
    expect(drain.message).toContain('idle 300 s: draining to release it');
    expect(v.decisions.at(-1).message).toContain('starting 6 machines of template h100');
  });

  it('keeps the latest 50 decisions only', async () => {
    for (let i = 0; i < 50; i++) await s.cp.store.autoscaleStart({ pool: 'cpu', heldFor: [[], []], reason: `spare ${i}`, now: Date.now() });
    const v = (await s.get('/v1/autoscale')).json();
    expect(v.decisions).toHaveLength(50);
    expect(v.decisions[0].message).toMatch(/^spare 49 /);
  });

  it('machine views: pool and lifecycle for an autoscaled machine, nothing for the others', async () => {
    const machines = (await s.get('/v1/machines')).json().machines as { name: string; pool?: string; lifecycle?: string }[];
    const by = Object.fromEntries(machines.map((m) => [m.name, m]));
    expect(by['h100-3']).toMatchObject({ pool: 'h100', lifecycle: 'ready' });
    expect(by['h100-4']).toMatchObject({ pool: 'h100', lifecycle: 'draining', scheduling: 'drained' });
    expect(by['static-1']).not.toHaveProperty('pool');
    expect(by['static-1']).not.toHaveProperty('lifecycle');
    expect((await s.get('/v1/machines/h100-3')).json()).toMatchObject({ name: 'h100-3', pool: 'h100', lifecycle: 'ready' });
    expect((await s.get('/v1/machines/static-1')).json()).not.toHaveProperty('lifecycle');
  });

  it('explain: a stage a starting machine is held for says which, how long it may take and since when', async () => {
    const e = (await s.get(`/v1/jobs/${held.id}/stages/train/explain`)).json();
    expect(e.state).toBe('ready');
    expect(e.reason).toMatch(/^a machine of pool h100 \(h100-1\) is starting for it, up to 600 s \(started \d+ s ago\)$/);
    expect(e.autoscale).toMatchObject({ kind: 'held', pool: 'h100', machine: 'h100-1' });
    // The cluster as it is still shows in the funnel.
    expect(e.funnel.length).toBeGreaterThan(0);
  });

  it("explain: the autoscaler's reason for starting none, beside the scheduler's", async () => {
    const a100 = await s.submit([gpuStage('train', 'a100')]);
    const quota = await s.submit([gpuStage('train')]);
    await s.cp.store.autoscaleWaitsPut({
      waits: [
        { stageId: a100.stageIds[0]!, kind: 'gpu-type', reason: 'no template has a100 GPUs', pool: null },
        { stageId: quota.stageIds[0]!, kind: 'quota', reason: "team vision's quota stops it: no machine is started", pool: null },
      ],
      now: Date.now(),
    });
    const e = (await s.get(`/v1/jobs/${a100.id}/stages/train/explain`)).json();
    expect(e.reason).toMatch(/^no ready machine can run it/);
    expect(e.autoscale).toEqual({ kind: 'gpu-type', message: 'no template has a100 GPUs', pool: null, machine: null });
    const q = (await s.get(`/v1/jobs/${quota.id}/stages/train/explain`)).json();
    expect(q.autoscale).toMatchObject({ kind: 'quota', message: "team vision's quota stops it: no machine is started" });
    // A stage the autoscaler said nothing of.
    const other = await s.submit([gpuStage('train')]);
    expect((await s.get(`/v1/jobs/${other.id}/stages/train/explain`)).json().autoscale).toBeNull();
  });

  it("a submit's never-placeable warning counts the pools' templates: a stage only a pool fits is not warned of, one no template fits is", async () => {
    const post = (stages: object[]) =>
      s.cp.app.inject({
        method: 'POST',
        url: '/v1/jobs',
        headers: { ...s.auth, 'content-type': 'application/json' },
        payload: JSON.stringify({ name: 'w', stages }),
      });
    // Only static-1 (a CPU machine) is registered: the h100 pool's template fits 8 h100 GPUs.
    const fits = await post([gpuStage('train')]);
    expect(fits.statusCode).toBe(201);
    expect(fits.json().warnings ?? []).toEqual([]);
    // A gang of 3 × 8 h100: only the pool's machines (max 6) could run it; the autoscaler starts them.
    const gang = await post([{ ...gpuStage('train'), resources: { machines: 3, cpu: 4, memory: '8Gi', gpu: { count: 8, type: 'h100' } } }]);
    expect(gang.statusCode).toBe(201);
    expect(gang.json().warnings ?? []).toEqual([]);
    const gangMisfit = await post([{ ...gpuStage('train'), resources: { machines: 3, cpu: 4, memory: '8Gi', gpu: { count: 8, type: 'a100' } } }]);
    expect(gangMisfit.json().warnings).toEqual([
      { stage: 'train', message: expect.stringMatching(/^no registered machines nor autoscaled pools could ever run it: needs 3 machines/) },
    ]);
    const misfit = await post([gpuStage('train', 'a100')]);
    expect(misfit.statusCode).toBe(201);
    expect(misfit.json().warnings).toEqual([
      { stage: 'train', message: expect.stringMatching(/^no registered machine nor autoscaled pool could ever run it: .*a100/) },
    ]);
  });
});
