import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine, gpuMachine } from '../../src/store/conformance/fixtures.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';

/**
 * `GET /v1/jobs/{id}/stages/{stage}/explain` (issue 10, "why pending"): one case per reason kind,
 * checking the numbers. The control plane is not started: nothing is placed but what a test places.
 */
describe('explain', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-explain-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
    ids.cpu = (await registerMachine(cp.store, cpuMachine('cpu-1', { cpuMillis: 8000, region: 'us-east' }))).id;
    ids.h100 = (await registerMachine(cp.store, gpuMachine('gpu-1', 2, 'h100', { region: 'us-east', labels: { nvlink: 'true' } }))).id;
    ids.a100 = (await registerMachine(cp.store, gpuMachine('gpu-2', 4, 'a100', { region: 'us-west' }))).id;
    ids.cordoned = (await registerMachine(cp.store, gpuMachine('gpu-3', 8, 'h100', { region: 'us-east' }))).id;
    await cp.store.machineCordon({ machine: 'gpu-3', now: Date.now() });
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const submit = async (stages: object[]) => {
    const r = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'x', stages }),
    });
    expect(r.statusCode).toBe(201);
    return r.json().id as string;
  };
  const explain = async (job: string, stage: string, headers = auth) =>
    cp.app.inject({ method: 'GET', url: `/v1/jobs/${job}/stages/${stage}/explain`, headers });
  const funnel = (e: { funnel: { step: string; machines: number }[] }) => e.funnel.map((f) => [f.step, f.machines]);

  it('a GPU type nobody in service has: each constraint with the machines it leaves, and what would help', async () => {
    const job = await submit([{ name: 'train', resources: { cpu: 4, memory: '8Gi', gpu: { count: 4, type: 'h100' } }, command: ['true'] }]);
    const e = (await explain(job, 'train')).json();
    expect(e.state).toBe('ready');
    expect(e.reason).toMatch(/^no ready machine can run it: /);
    expect(e.registered).toBe(4);
    expect(funnel(e)).toEqual([
      ['ready and in service (not suspect, lost, cordoned or draining)', 3],
      ['with h100 GPUs', 1],
      ['with 4 h100 GPUs in all', 0],
      ['with 4 CPU in all', 0],
      ['with 8Gi memory in all', 0],
      ['with 4 free h100 GPUs now', 0],
      ['with 4 CPU free now', 0],
      ['with 8Gi memory free now', 0],
    ]);
    expect(e.suggestions).toEqual([
      'ask for 2 GPUs instead of 4: 1 machine could run it now',
      'accept any GPU type (not only h100): 1 machine could run it now',
    ]);
    expect(e.queue).toEqual({ ahead: 0, waiting: 1 });
  });

  it('region and labels: the machines each leaves; dropping one is suggested when it would help', async () => {
    const job = await submit([{ name: 'e', resources: { cpu: 1, gpu: { count: 1, type: 'a100' } }, placement: { region: 'us-east' }, command: ['true'] }]);
    const e = (await explain(job, 'e')).json();
    expect(funnel(e).slice(0, 3)).toEqual([
      ['ready and in service (not suspect, lost, cordoned or draining)', 3],
      ['in region us-east', 2],
      ['with a100 GPUs', 0],
    ]);
    expect(e.suggestions).toContain('drop region us-east: 1 machine could run it now');
  });

  it('busy: the GPUs it needs are held; it waits its turn, with its place in the queue', async () => {
    // Another job's stage holds both h100s of gpu-1.
    const holder = await submit([{ name: 'hold', resources: { cpu: 1, gpu: { count: 2, type: 'h100' } }, command: ['true'] }]);
    const hs = (await cp.store.jobGet({ jobId: holder }))!.stages[0]!;
    const r = await cp.store.planApply({
      plan: {
        placements: [{ stageId: hs.id, machineId: ids.h100!, gpuIndices: [0, 1], cpuMillis: 1000, memoryBytes: hs.definition.resources.memoryBytes }],
        pending: [],
      },
      now: Date.now(),
      leaseMs: 60_000,
    });
    expect(r.applied).toHaveLength(1);
    const first = await submit([{ name: 'g', resources: { cpu: 1, gpu: { count: 1, type: 'h100' } }, command: ['true'] }]);
    const second = await submit([{ name: 'g', resources: { cpu: 1, gpu: { count: 1, type: 'h100' } }, command: ['true'] }]);
    const e = (await explain(second, 'g')).json();
    expect(e.reason).toBe('no machine with 1 free h100 GPU: 1 of 1 matching machine busy');
    expect(funnel(e).at(-3)).toEqual(['with 1 free h100 GPU now', 0]);
    expect(e.queue).toEqual({ ahead: 1, waiting: 2 });
    expect((await explain(first, 'g')).json().queue).toEqual({ ahead: 0, waiting: 2 });
  });

  it('a pending stage waits for its upstream; a running one says where', async () => {
    const job = await submit([
      { name: 'a', resources: { cpu: 1 }, command: ['true'] },
      { name: 'b', needs: ['a'], resources: { cpu: 1 }, command: ['true'] },
    ]);
    const a = (await cp.store.jobGet({ jobId: job }))!.stages[0]!;
    await cp.store.planApply({
      plan: {
        placements: [{ stageId: a.id, machineId: ids.cpu!, gpuIndices: [], cpuMillis: 1000, memoryBytes: a.definition.resources.memoryBytes }],
        pending: [],
      },
      now: Date.now(),
      leaseMs: 60_000,
    });
    const b = (await explain(job, 'b')).json();
    expect(b).toMatchObject({ state: 'pending', reason: 'waits for a (scheduled)', waitsFor: [{ stage: 'a', state: 'scheduled' }], queue: null });
    expect((await explain(job, 'a')).json()).toMatchObject({ state: 'scheduled', reason: 'scheduled on cpu-1 (attempt 1)' });
  });

  it('a CPU stage where only GPU machines have room: the setting that lets it in is named', async () => {
    const job = await submit([{ name: 'big', resources: { cpu: 16 }, command: ['true'] }]);
    const e = (await explain(job, 'big')).json();
    expect(funnel(e)).toContainEqual(['with 16 CPU in all', 2]);
    expect(funnel(e)).toContainEqual(['without GPUs (a CPU stage; placement.allowGpuMachines not set)', 0]);
  });

  it("another team's job, or a stage that does not exist: 404", async () => {
    const job = await submit([{ name: 'a', command: ['true'] }]);
    const other = bearer(await makeToken(cp.store, 'team', { team: 'elsewhere' }));
    expect((await explain(job, 'a', other)).statusCode).toBe(404);
    expect((await explain(job, 'nope')).statusCode).toBe(404);
  });
});
