import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine, gpuMachine } from '../../src/store/conformance/fixtures.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';

/** What the dashboard reads beyond the CLI's routes, and how the server serves the dashboard itself. */
describe('dashboard: serving the build, and the routes it reads', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin: Record<string, string>;
  const script = `console.log(${JSON.stringify('x'.repeat(5000))});`;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-dashboard-'));
    const web = join(dir, 'web');
    mkdirSync(join(web, 'assets'), { recursive: true });
    writeFileSync(join(web, 'index.html'), '<!doctype html><title>Gantry</title><script type="module" src="/assets/app-1a2b.js"></script>');
    writeFileSync(join(web, 'assets', 'app-1a2b.js'), script);
    writeFileSync(join(web, 'favicon.svg'), '<svg xmlns="http://www.w3.org/2000/svg"/>');
    // Not started: no loop runs; the test places attempts and takes samples itself.
    cp = await createControlPlane(defaultServerConfig({ dataDir: join(dir, 'data'), port: 0, dashboardDir: web }));
    admin = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const get = (url: string, headers: Record<string, string> = {}) => cp.app.inject({ method: 'GET', url, headers });
  const submit = async (spec: object, auth = admin) => {
    const r = await cp.app.inject({ method: 'POST', url: '/v1/jobs', headers: { ...auth, 'content-type': 'application/json' }, payload: JSON.stringify(spec) });
    expect(r.statusCode).toBe(201);
    return r.json<{ id: string; stages: { name: string }[] }>();
  };

  it('serves the page at / and at every client-side path, with a policy that lets it run only its own scripts', async () => {
    for (const path of ['/', '/jobs', '/jobs/job_123?stage=train', '/pools', '/signin']) {
      const r = await get(path);
      expect(r.statusCode, path).toBe(200);
      expect(r.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(r.body).toContain('<title>Gantry</title>');
      expect(r.headers['content-security-policy']).toContain("script-src 'self'");
      expect(r.headers['cache-control']).toBe('no-cache');
    }
  });

  it('serves its files with their types, hashed ones cached for good, gzipped when asked, 304 when unchanged', async () => {
    const js = await get('/assets/app-1a2b.js');
    expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(js.headers['cache-control']).toContain('immutable');
    expect(js.body).toBe(script);
    const gz = await get('/assets/app-1a2b.js', { 'accept-encoding': 'gzip, br' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.rawPayload).toString()).toBe(script);
    expect((await get('/assets/app-1a2b.js', { 'if-none-match': String(js.headers.etag) })).statusCode).toBe(304);
    expect((await get('/favicon.svg')).headers['content-type']).toBe('image/svg+xml');
  });

  it("answers the API's paths and missing files as before: a 404 in JSON, never the page", async () => {
    for (const path of ['/v1/nothing', '/v1/jobs/x/y/z', '/assets/gone.js', '/favicon.ico', '/assets/../../data/gantry.db']) {
      const r = await get(path);
      expect(r.statusCode, path).toBe(404);
      expect(r.headers['content-type'], path).toContain('application/json');
    }
    expect((await get('/%E0%A4%A')).statusCode).toBe(400);
    expect((await cp.app.inject({ method: 'POST', url: '/jobs' })).statusCode).toBe(404);
    // The API's own routes are unchanged, and still need a token.
    expect((await get('/v1/jobs')).statusCode).toBe(401);
    expect((await get('/healthz')).json()).toMatchObject({ ok: true });
  });

  it('starts without a build, says so at /, and serves the API as ever', async () => {
    const bare = await createControlPlane(defaultServerConfig({ dataDir: join(dir, 'bare'), port: 0, dashboardDir: join(dir, 'no-such-build') }));
    try {
      expect(bare.dashboard.problem).toMatch(/not built .*index\.html is missing.*npm run build/);
      const r = await bare.app.inject({ method: 'GET', url: '/' });
      expect(r.statusCode).toBe(404);
      expect(r.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(r.body).toMatch(/dashboard is not here: the dashboard is not built.*npm run build/s);
      expect((await bare.app.inject({ method: 'GET', url: '/jobs' })).statusCode).toBe(404);
      expect((await bare.app.inject({ method: 'GET', url: '/openapi.json' })).statusCode).toBe(200);
    } finally {
      await bare.stop();
    }
  });

  it('whoami: the token a request came with; a join token is refused, no token is 401', async () => {
    expect((await get('/v1/whoami', admin)).json()).toMatchObject({ kind: 'admin', team: null, name: 'test admin' });
    const team = bearer(await makeToken(cp.store, 'team', { team: 'vision', name: 'vision board' }));
    expect((await get('/v1/whoami', team)).json()).toMatchObject({ kind: 'team', team: 'vision', name: 'vision board' });
    const join = await get('/v1/whoami', bearer(await makeToken(cp.store, 'join')));
    expect(join.statusCode).toBe(403);
    expect(join.json().message).toMatch(/needs a team or admin token/);
    expect((await get('/v1/whoami')).statusCode).toBe(401);
  });

  it('lists jobs by part of their name', async () => {
    await submit({ name: 'ResNet-train', stages: [{ name: 'a', command: ['true'] }] });
    await submit({ name: 'bert-eval', stages: [{ name: 'a', command: ['true'] }] });
    expect((await get('/v1/jobs?name=resnet', admin)).json().jobs.map((j: { name: string }) => j.name)).toEqual(['ResNet-train']);
    expect((await get('/v1/jobs?name=', admin)).statusCode).toBe(400);
  });

  it('pools: queue depth, oldest wait and why, by reason, beside what the machines hold; over time from samples', async () => {
    await registerMachine(cp.store, cpuMachine('cpu-a'));
    await registerMachine(cp.store, gpuMachine('gpu-a', 2));
    await submit({ name: 'needs-tpu', stages: [{ name: 'fit', resources: { gpu: { count: 1, type: 'tpu9' } }, command: ['true'] }] });
    await submit({ name: 'needs-4', stages: [{ name: 'fit', resources: { gpu: { count: 4, type: 'h100' } }, command: ['true'] }] });
    const pools = (await get('/v1/pools', admin)).json<{
      pools: { pool: string; queued: number; reasons: { kind: string; stages: number; message: string }[]; machines: object; gpus: object[] }[];
    }>();
    const by = new Map(pools.pools.map((p) => [p.pool, p]));
    // The two CPU jobs of the test before wait too, and a machine has room for them: placeable.
    expect(by.get('cpu')).toMatchObject({ queued: 2, reasons: [{ kind: 'placeable', stages: 2 }], machines: { total: 1, ready: 1, eligible: 1 } });
    expect(by.get('gpu:tpu9')).toMatchObject({ queued: 1, reasons: [{ kind: 'gpu-type', stages: 1 }], machines: { total: 0 } });
    expect(by.get('gpu:tpu9')!.reasons[0]!.message).toMatch(/lack 1 tpu9 GPU/);
    expect(by.get('gpu:h100')).toMatchObject({ queued: 1, reasons: [{ kind: 'gpu-total', stages: 1 }], gpus: [{ type: 'h100', allocated: 0, total: 2 }] });

    await cp.loops.pools.runOnce();
    await cp.loops.pools.runOnce();
    const history = (await get('/v1/pools/history', admin)).json<{
      intervalMs: number;
      samples: { at: number; pools: { pool: string; queued: number }[] }[];
    }>();
    expect(history.intervalMs).toBe(15_000);
    expect(history.samples).toHaveLength(3);
    expect(history.samples[0]!.pools.find((p) => p.pool === 'gpu:tpu9')).toMatchObject({ queued: 1 });
    const since = history.samples[1]!.at;
    expect((await get(`/v1/pools/history?since=${since}`, admin)).json().samples.length).toBeLessThanOrEqual(2);
    expect((await get('/v1/pools/history?max=2', admin)).json().samples).toHaveLength(2);
  });

  it("what runs where: every held attempt with its job; another team's shows its resources only", async () => {
    const g = await registerMachine(cp.store, gpuMachine('gpu-b', 1));
    const visionToken = bearer(await makeToken(cp.store, 'team', { team: 'vision' }));
    const job = await submit(
      { name: 'vision-train', stages: [{ name: 'train', resources: { gpu: { count: 1, type: 'h100' } }, command: ['true'] }] },
      visionToken,
    );
    const s = (await cp.store.jobGet({ jobId: job.id }))!.stages[0]!;
    const plan = {
      placements: [
        { stageId: s.id, machineId: g.id, gpuIndices: [0], cpuMillis: s.definition.resources.cpuMillis, memoryBytes: s.definition.resources.memoryBytes },
      ],
      pending: [],
    };
    expect((await cp.store.planApply({ plan, now: Date.now(), leaseMs: 60_000 })).applied).toHaveLength(1);
    const mine = (await get('/v1/attempts', visionToken)).json().attempts;
    expect(mine).toEqual([
      expect.objectContaining({ machine: 'gpu-b', jobId: job.id, jobName: 'vision-train', team: 'vision', stage: 'train', gpus: [0], state: 'scheduled' }),
    ]);
    expect((await get('/v1/attempts', admin)).json().attempts).toEqual(mine);
    const other = (await get('/v1/attempts', bearer(await makeToken(cp.store, 'team', { team: 'nlp' })))).json().attempts;
    expect(other).toEqual([expect.objectContaining({ machine: 'gpu-b', jobId: null, jobName: null, team: null, stage: null, gpus: [0] })]);
    expect((await get('/v1/pools', admin)).json().pools.find((p: { pool: string }) => p.pool === 'gpu:h100').gpus).toEqual([
      { type: 'h100', allocated: 1, total: 3 },
    ]);
  });
});
