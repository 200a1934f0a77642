import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { gpuMachine } from '../../src/store/conformance/fixtures.js';

const GiB = 2 ** 30;

/**
 * Shares of a GPU through the API (issue 29): the spec's `gpu.count` below 1 and `gpu.memory`, a
 * share of more than one GPU refused with a 400 naming the field, and what people see once shares
 * run (the job's attempts, machines, what runs where, pools, teams, metrics) counting a share as
 * its part of a GPU. The scheduler is not started: the test places through the store's plan apply.
 */
describe('shares of a GPU through the API', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-shares-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const submit = (gpu: unknown, team = 'default') =>
    cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'infer', team, stages: [{ name: 'a', resources: { cpu: 1, memory: '256Mi', gpu }, command: ['true'] }] }),
    });
  const get = (url: string) => cp.app.inject({ method: 'GET', url, headers: auth });

  it('refuses 1.5 GPUs, 0.0001 of one and a GPU request with neither count nor memory, with a 400 naming the field', async () => {
    for (const [gpu, says] of [
      [{ count: 1.5 }, 'a share is of one GPU only; use a whole number of GPUs, or a share below 1'],
      [{ count: 2.5, type: 'h100' }, 'a share is of one GPU only'],
      [{ count: 0.0001 }, 'at most 3 decimal places'],
      [{}, 'needs a count'],
    ] as const) {
      const r = await submit(gpu);
      expect(r.statusCode, JSON.stringify(gpu)).toBe(400);
      expect(r.body).toContain('/stages/0/resources/gpu/count');
      expect(r.body).toContain(says);
    }
    expect((await get('/v1/jobs')).json().jobs).toHaveLength(0);
  });

  it('shows shares wherever GPUs are counted', async () => {
    const gpus = [0, 1].map((index) => ({ index, uuid: `GPU-${index}`, name: 'NVIDIA H100', type: 'h100', memoryMiB: 80 * 1024 }));
    const m = await registerMachine(cp.store, gpuMachine('g-1', 2, 'h100', { gpus, gpusDeclared: false }));
    const r = await submit({ count: 0.25, type: 'h100', memory: '10Gi' }, 'vision');
    expect(r.statusCode).toBe(201);
    const jobId = r.json().id as string;
    const stage = (await get(`/v1/jobs/${jobId}`)).json().stages[0];
    expect(stage.resources.gpu).toEqual({ count: 1, milli: 250, memoryBytes: 10 * GiB, types: ['h100'] });
    expect(stage.pool).toBe('gpu:h100');

    const s = (await cp.store.jobGet({ jobId }))!.stages[0]!;
    const plan = {
      placements: [{ stageId: s.id, machineId: m.id, gpuIndices: [1], gpuMilli: 250, gpuMemoryBytes: 10 * GiB, cpuMillis: 1000, memoryBytes: 2 ** 28 }],
      pending: [],
    };
    expect((await cp.store.planApply({ plan, now: Date.now(), leaseMs: 60_000 })).applied).toHaveLength(1);

    const attempt = (await get(`/v1/jobs/${jobId}`)).json().stages[0].attempts[0];
    expect(attempt).toMatchObject({ gpus: [1], gpuType: 'h100', gpuShare: { milli: 250, memoryBytes: 10 * GiB } });

    const machine = (await get('/v1/machines/g-1')).json();
    expect(machine.gpus.map((g: { busy: boolean; usedMilli: number; memoryBytes: number }) => [g.busy, g.usedMilli, g.memoryBytes])).toEqual([
      [false, 0, 80 * GiB],
      [true, 250, 80 * GiB],
    ]);
    expect(machine.allocated).toMatchObject({ gpuIndices: [1], gpus: 0.25, gpuHeld: [{ index: 1, milli: 250, memoryBytes: 10 * GiB }] });

    const held = (await get('/v1/attempts')).json().attempts;
    expect(held).toEqual([expect.objectContaining({ gpus: [1], gpuShare: { milli: 250, memoryBytes: 10 * GiB } })]);

    const pool = (await get('/v1/pools')).json().pools.find((p: { pool: string }) => p.pool === 'gpu:h100');
    expect(pool.gpus).toEqual([{ type: 'h100', allocated: 0.25, total: 2 }]);

    const team = (await get('/v1/teams')).json().teams.find((t: { name: string }) => t.name === 'vision');
    expect(team.usage.gpus).toEqual({ h100: 0.25 });

    const metrics = await cp.app.inject({ method: 'GET', url: '/metrics', headers: auth });
    expect(metrics.body).toMatch(/gantry_pool_gpus_allocated\{pool="gpu:h100",gpu_type="h100"\} 0\.25/);
  });
});
