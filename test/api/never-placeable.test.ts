import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine, gpuMachine } from '../../src/store/conformance/fixtures.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';

/** A stage no registered machine could ever run is said at submit (issue 10): a warning, or with ?strict=true a refusal. */
describe('submit: never-placeable stages', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-never-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const post = (url: string, body: unknown) =>
    cp.app.inject({ method: 'POST', url, headers: { ...auth, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
  const job = (name: string, stages: object[]) => ({ name, stages: stages.map((s, i) => ({ name: `s${i}`, command: ['true'], ...s })) });
  const jobs = async () => (await cp.store.jobList({ limit: 1000 })).length;

  it('judges nothing while no machine is registered (they may still be joining)', async () => {
    const r = await post('/v1/jobs?strict=true', job('early', [{ resources: { gpu: { count: 8, type: 'h100' } } }]));
    expect(r.statusCode).toBe(201);
    expect(r.json().warnings).toBeUndefined();
  });

  it('warns, naming the stage and why; accepts the job; --strict refuses it and writes nothing', async () => {
    await registerMachine(cp.store, cpuMachine('cpu-1', { cpuMillis: 8000 }));
    await registerMachine(cp.store, gpuMachine('gpu-1', 2, 'h100'));
    const fine = await post('/v1/jobs', job('fine', [{}, { resources: { gpu: { count: 2, type: 'h100' } } }]));
    expect(fine.statusCode).toBe(201);
    expect(fine.json().warnings).toBeUndefined();

    const bad = await post(
      '/v1/jobs',
      job('bad', [{}, { resources: { gpu: { count: 1, type: 'a100' } } }, { resources: { gpu: { count: 8, type: 'h100' } } }, { resources: { cpu: 64 } }]),
    );
    expect(bad.statusCode).toBe(201);
    expect(bad.json().warnings).toEqual([
      { stage: 's1', message: 'no registered machine could ever run it: 2 lack 1 a100 GPU' },
      { stage: 's2', message: 'no registered machine could ever run it: 2 lack 8 h100 GPUs' },
      { stage: 's3', message: expect.stringMatching(/^no registered machine could ever run it: .*too small for 64 CPU/) },
    ]);

    const before = await jobs();
    const strict = await post('/v1/jobs?strict=true', job('strict', [{ resources: { gpu: { count: 1, type: 'a100' } } }]));
    expect(strict.statusCode).toBe(400);
    expect(strict.json().issues).toEqual([
      { path: '/stages/0', message: 'stage s0: no registered machine could ever run it: 2 lack 1 a100 GPU (strict: refused)' },
    ]);
    expect(await jobs()).toBe(before);
  });

  it('a batch: each job its own warnings; strict refuses the whole batch, naming the job', async () => {
    const body = { jobs: [job('ok', [{}]), job('odd', [{}, { placement: { labels: { rack: 'nowhere' } } }])] };
    const r = await post('/v1/jobs/batch', body);
    expect(r.statusCode).toBe(201);
    expect(r.json().jobs.map((j: { name: string; warnings?: unknown[] }) => [j.name, j.warnings?.length ?? 0])).toEqual([
      ['ok', 0],
      ['odd', 1],
    ]);
    const before = await jobs();
    const strict = await post('/v1/jobs/batch?strict=1', body);
    expect(strict.statusCode).toBe(400);
    expect(strict.json().issues.map((i: { path: string }) => i.path)).toEqual(['/jobs/1/stages/1']);
    expect(await jobs()).toBe(before);
  });

  it("a gang stage (resources.machines 2 or more) is judged by the gang's rule: all its members at once on the registered machines", async () => {
    await registerMachine(cp.store, gpuMachine('gpu-gang', 2, 'h100'));
    const fits = await post('/v1/jobs?strict=true', job('gang', [{ resources: { machines: 2, gpu: { count: 1, type: 'h100' } } }]));
    expect(fits.statusCode).toBe(201);
    expect(fits.json().warnings).toBeUndefined();
    const never = await post('/v1/jobs', job('gang-big', [{ resources: { machines: 2, gpu: { count: 4, type: 'h100' } } }]));
    expect(never.statusCode).toBe(201);
    expect(never.json().warnings).toEqual([{ stage: 's0', message: expect.stringContaining('4') }]);
    // Each member fits a machine, but only two machines have h100 GPUs: three members never fit at once.
    const three = await post('/v1/jobs', job('gang-3', [{ resources: { machines: 3, gpu: { count: 1, type: 'h100' } } }]));
    expect(three.statusCode).toBe(201);
    expect(three.json().warnings).toEqual([{ stage: 's0', message: expect.stringMatching(/^no registered machines could ever run it: needs 3 machines .*2/) }]);
    expect((await post('/v1/jobs?strict=true', job('gang-3-strict', [{ resources: { machines: 3, gpu: { count: 1, type: 'h100' } } }]))).statusCode).toBe(400);
  });
});

/**
 * A stage that is not preemptible and asks for more than its team's whole quota would wait for
 * good (issue 28): said at submit like a stage no machine could run, refused with ?strict=true,
 * and a quota lowered after submit makes its reason say it can never fit (API, explain, pools).
 */
describe("submit: a stage over its team's whole quota", () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-quota-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
    await registerMachine(cp.store, cpuMachine('cpu-1', { cpuMillis: 8000 }));
    await registerMachine(cp.store, gpuMachine('gpu-1', 8, 'h100'));
    const made = await send('POST', '/v1/teams', { name: 'vision', quota: { gpus: { h100: 2 } } });
    expect(made.statusCode).toBe(201);
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const send = (method: 'POST' | 'PATCH' | 'GET', url: string, body?: unknown) =>
    cp.app.inject({ method, url, headers: { ...auth, 'content-type': 'application/json' }, ...(body === undefined ? {} : { payload: JSON.stringify(body) }) });
  const job = (name: string, stage: object) => ({ name, team: 'vision', stages: [{ name: 'train', command: ['true'], ...stage }] });
  const jobs = async () => (await cp.store.jobList({ limit: 1000 })).length;
  const never =
    "team vision's quota is 2 h100 GPUs, the stage needs 4: it can never run within the quota (raise the quota, or make the stage preemptible so it may borrow)";

  it('warns naming the stage, the resource, the quota and the request; --strict refuses it (400) and writes nothing', async () => {
    const warned = await send('POST', '/v1/jobs', job('big', { resources: { gpu: { count: 4, type: 'h100' } } }));
    expect(warned.statusCode).toBe(201);
    expect(warned.json().warnings).toEqual([{ stage: 'train', message: never }]);

    const before = await jobs();
    const strict = await send('POST', '/v1/jobs?strict=true', job('big', { resources: { gpu: { count: 4, type: 'h100' } } }));
    expect(strict.statusCode).toBe(400);
    expect(strict.json().issues).toEqual([{ path: '/stages/0', message: `stage train: ${never} (strict: refused)` }]);
    const batch = await send('POST', '/v1/jobs/batch?strict=1', {
      jobs: [job('ok', {}), job('big', { resources: { cpu: 1, gpu: { count: 3, type: 'h100' } } })],
    });
    expect(batch.statusCode).toBe(400);
    expect(batch.json().issues.map((i: { path: string }) => i.path)).toEqual(['/jobs/1/stages/0']);
    expect(await jobs()).toBe(before);
  });

  it('judges neither a preemptible stage (it may borrow) nor one within the quota, nor a team without a quota', async () => {
    for (const [name, spec] of [
      ['borrows', job('borrows', { preemptible: true, resources: { gpu: { count: 4, type: 'h100' } } })],
      ['fits', job('fits', { resources: { gpu: { count: 2, type: 'h100' } } })],
      ['free', { ...job('free', { resources: { gpu: { count: 4, type: 'h100' } } }), team: 'nlp' }],
    ] as const) {
      const r = await send('POST', '/v1/jobs?strict=true', spec);
      expect(r.statusCode, name).toBe(201);
      expect(r.json().warnings, name).toBeUndefined();
    }
  });

  it('a quota lowered after submit: the waiting stage says it can never fit, in the job, explain and the pools', async () => {
    const made = await send('POST', '/v1/jobs', job('later', { resources: { gpu: { count: 2, type: 'h100' } } }));
    expect(made.statusCode).toBe(201);
    const id = made.json().id as string;
    expect((await send('PATCH', '/v1/teams/vision', { quota: { gpus: { h100: 1 } } })).statusCode).toBe(200);
    const lowered =
      "team vision's quota is 1 h100 GPUs, the stage needs 2: it can never run within the quota (raise the quota, or make the stage preemptible so it may borrow)";
    const view = (await send('GET', `/v1/jobs/${id}`)).json();
    expect(view.stages[0]).toMatchObject({ state: 'ready', pendingReason: lowered });
    const ex = (await send('GET', `/v1/jobs/${id}/stages/train/explain`)).json();
    expect(ex.quota).toBe(lowered);
    const pool = (await send('GET', '/v1/pools')).json().pools.find((p: { pool: string }) => p.pool === 'gpu:h100');
    expect(pool.reasons).toContainEqual({
      kind: 'quota-never',
      stages: expect.any(Number),
      message: expect.stringContaining('it can never run within the quota'),
    });
    expect(pool.reasons.map((r: { kind: string }) => r.kind)).not.toContain('quota');
  });

  it('a GPU quota may be a share (2.5 h100 GPUs, at most 3 decimals); a finer one is refused naming it, and changes nothing', async () => {
    const set = await send('PATCH', '/v1/teams/vision', { quota: { gpus: { h100: 2.5 } } });
    expect(set.statusCode).toBe(200);
    expect(set.json()).toMatchObject({ quotaText: 'gpu:h100=2.5', quota: { gpus: { h100: 2.5 } } });
    const fine = await send('PATCH', '/v1/teams/vision', { quota: { gpus: { h100: 0.0001 } } });
    expect(fine.statusCode).toBe(400);
    expect(fine.json().issues).toEqual([{ path: '/quota/gpus/h100', message: '0.0001 GPUs: at most 3 decimals (thousandths of a GPU), e.g. 2.5' }]);
    expect((await send('GET', '/v1/teams/vision')).json()).toMatchObject({ quotaText: 'gpu:h100=2.5' });
  });
});
