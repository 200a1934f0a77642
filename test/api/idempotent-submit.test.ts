import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { bearer, makeToken } from '../support/tokens.js';
import { defaultServerConfig } from '../../src/server/server-config.js';

/** `Idempotency-Key` on submits: a retried request makes no second job. */
describe('idempotent submit', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-idem-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const spec = (name: string) => ({ name, stages: [{ name: 'a', command: ['true'] }] });
  const post = (url: string, body: unknown, key?: string) =>
    cp.app.inject({
      method: 'POST',
      url,
      headers: { ...auth, 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      payload: JSON.stringify(body),
    });
  const jobCount = async () => (await cp.store.jobList({ limit: 1000 })).length;

  it('the same key and request answer the first job (200), not a second one', async () => {
    const before = await jobCount();
    const first = await post('/v1/jobs', spec('once'), 'k-1');
    expect(first.statusCode).toBe(201);
    const again = await post('/v1/jobs', spec('once'), 'k-1');
    expect(again.statusCode).toBe(200);
    expect(again.json().id).toBe(first.json().id);
    expect(await jobCount()).toBe(before + 1);
    // No key: every request is a new job, as before.
    expect((await post('/v1/jobs', spec('once'))).statusCode).toBe(201);
    expect((await post('/v1/jobs', spec('once'))).statusCode).toBe(201);
    expect(await jobCount()).toBe(before + 3);
  });

  it('the same key with another request is refused (409), naming the key, and writes nothing', async () => {
    await post('/v1/jobs', spec('first'), 'k-2');
    const before = await jobCount();
    const r = await post('/v1/jobs', spec('second'), 'k-2');
    expect(r.statusCode).toBe(409);
    expect(r.json().message).toMatch(/Idempotency-Key "k-2" was already used for a different request/);
    // The same body on the other route is another request too.
    expect((await post('/v1/jobs/batch', { jobs: [spec('first')] }, 'k-2')).statusCode).toBe(409);
    expect(await jobCount()).toBe(before);
  });

  it('a batch retried with its key answers the same jobs', async () => {
    const body = { jobs: [spec('b1'), spec('b2')] };
    const first = await post('/v1/jobs/batch', body, 'k-3');
    expect(first.statusCode).toBe(201);
    const again = await post('/v1/jobs/batch', body, 'k-3');
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(first.json());
  });

  it('refuses a malformed key (400)', async () => {
    const r = await post('/v1/jobs', spec('x'), 'has space');
    expect(r.statusCode).toBe(400);
    expect(r.json().message ?? JSON.stringify(r.json())).toMatch(/idempotency-key/);
  });

  it('forgets keys after a day', async () => {
    await post('/v1/jobs', spec('old'), 'k-4');
    expect(await cp.store.idempotencyPrune({ before: Date.now() + 1 })).toBeGreaterThan(0);
    expect((await post('/v1/jobs', spec('old'), 'k-4')).statusCode).toBe(201);
  });
});
