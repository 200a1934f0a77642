import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from '../support/tokens.js';

/** Issue 28: API answers carried no Cache-Control, so a browser or a proxy could keep jobs, logs and token metadata. */
describe('Cache-Control: no-store on API answers', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin: Record<string, string>;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-no-store-'));
    const web = join(dir, 'web');
    mkdirSync(join(web, 'assets'), { recursive: true });
    writeFileSync(join(web, 'index.html'), '<!doctype html><title>Gantry</title>');
    writeFileSync(join(web, 'assets', 'app-1a2b.js'), 'console.log(1);');
    cp = await createControlPlane(defaultServerConfig({ dataDir: join(dir, 'data'), port: 0, dashboardDir: web }));
    admin = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const get = (url: string, headers: Record<string, string> = {}) => cp.app.inject({ method: 'GET', url, headers });

  it('every /v1 answer says no-store: successes, refusals, errors and unknown routes', async () => {
    const submitted = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...admin, 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'j', stages: [{ name: 'a', command: ['true'] }] }),
    });
    const answers = {
      submit: submitted,
      jobs: await get('/v1/jobs', admin),
      whoami: await get('/v1/whoami', admin),
      tokens: await get('/v1/tokens', admin),
      'no token': await get('/v1/jobs'),
      'bad query': await get('/v1/jobs?limit=nope', admin),
      'no such job': await get('/v1/jobs/job_nope', admin),
      'no such route': await get('/v1/nothing-here', admin),
    };
    expect(Object.fromEntries(Object.entries(answers).map(([k, r]) => [k, r.statusCode]))).toEqual({
      submit: 201,
      jobs: 200,
      whoami: 200,
      tokens: 200,
      'no token': 401,
      'bad query': 400,
      'no such job': 404,
      'no such route': 404,
    });
    for (const [what, r] of Object.entries(answers)) expect(r.headers['cache-control'], what).toBe('no-store');
  });

  it("leaves the dashboard's files their own caching", async () => {
    expect((await get('/assets/app-1a2b.js')).headers['cache-control']).toBe('public, max-age=31536000, immutable');
    expect((await get('/jobs')).headers['cache-control']).toBe('no-cache');
  });
});
