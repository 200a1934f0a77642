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
});
