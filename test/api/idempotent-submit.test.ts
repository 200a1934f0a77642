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

/**
 * Keys are the caller's (issue 28): a team's tokens share their team's keys, an admin token has
 * its own, and a key another caller used is a fresh key: nothing of the other's job comes back.
 */
describe('idempotent submit, per caller', () => {
  let cp: ControlPlane;
  let dir: string;
  const tokens: Record<'a' | 'a2' | 'b' | 'admin1' | 'admin2', Record<string, string>> = {} as never;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-idem-scope-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    tokens.a = bearer(await makeToken(cp.store, 'team', { team: 'alpha' }));
    tokens.a2 = bearer(await makeToken(cp.store, 'team', { team: 'alpha', name: 'alpha CI' }));
    tokens.b = bearer(await makeToken(cp.store, 'team', { team: 'beta' }));
    tokens.admin1 = bearer(await makeToken(cp.store, 'admin'));
    tokens.admin2 = bearer(await makeToken(cp.store, 'admin', { name: 'second admin' }));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const spec = (name: string) => ({ name, stages: [{ name: 'a', command: ['true'] }] });
  const post = (who: keyof typeof tokens, url: string, body: unknown, key: string) =>
    cp.app.inject({
      method: 'POST',
      url,
      headers: { ...tokens[who], 'content-type': 'application/json', 'idempotency-key': key },
      payload: JSON.stringify(body),
    });
  const submitAudits = async (tokenHeader: Record<string, string>) => {
    const who = await cp.app.inject({ method: 'GET', url: '/v1/whoami', headers: tokenHeader });
    const rows = (await cp.app.inject({ method: 'GET', url: '/v1/audit', headers: tokens.admin1 })).json<{ entries: { tokenId: string; action: string }[] }>()
      .entries;
    return rows.filter((r) => r.tokenId === who.json<{ tokenId: string }>().tokenId && r.action === 'job.submit');
  };

  it("team B sending team A's key and body gets a new job of its own, not A's", async () => {
    const a = await post('a', '/v1/jobs', spec('train'), 'shared-1');
    expect(a.statusCode).toBe(201);
    const b = await post('b', '/v1/jobs', spec('train'), 'shared-1');
    expect(b.statusCode).toBe(201);
    expect(b.json().id).not.toBe(a.json().id);
    expect(b.json().team).toBe('beta');
    expect(JSON.stringify(b.json())).not.toContain(a.json().id);
    // Each team's retry answers its own job.
    expect((await post('a', '/v1/jobs', spec('train'), 'shared-1')).json().id).toBe(a.json().id);
    expect((await post('b', '/v1/jobs', spec('train'), 'shared-1')).json().id).toBe(b.json().id);
    // B's submit is a change like any other: audited under B's token.
    expect((await submitAudits(tokens.b)).length).toBeGreaterThan(0);
  });

  it("team B using a key first does not take it from team A: A's later submit makes A's job", async () => {
    const b = await post('b', '/v1/jobs', spec('eval'), 'shared-2');
    expect(b.statusCode).toBe(201);
    const a = await post('a', '/v1/jobs', spec('eval'), 'shared-2');
    expect(a.statusCode).toBe(201);
    expect(a.json().id).not.toBe(b.json().id);
    expect(a.json().team).toBe('alpha');
    const seen = await cp.app.inject({ method: 'GET', url: `/v1/jobs/${a.json().id}`, headers: tokens.a });
    expect(seen.statusCode).toBe(200);
    // And a different body under the same key from another team is no conflict either.
    expect((await post('a', '/v1/jobs', spec('eval-other'), 'shared-3')).statusCode).toBe(201);
    expect((await post('b', '/v1/jobs', spec('eval-different'), 'shared-3')).statusCode).toBe(201);
  });

  it("a team's tokens share its keys: a second token of the team retrying gets the team's job", async () => {
    const first = await post('a', '/v1/jobs', spec('rotated'), 'team-key');
    const again = await post('a2', '/v1/jobs', spec('rotated'), 'team-key');
    expect(again.statusCode).toBe(200);
    expect(again.json().id).toBe(first.json().id);
  });

  it("an admin token's keys are its own", async () => {
    const one = await post('admin1', '/v1/jobs', spec('nightly'), 'admin-key');
    expect(one.statusCode).toBe(201);
    const two = await post('admin2', '/v1/jobs', spec('nightly'), 'admin-key');
    expect(two.statusCode).toBe(201);
    expect(two.json().id).not.toBe(one.json().id);
    expect((await post('admin1', '/v1/jobs', spec('nightly'), 'admin-key')).json().id).toBe(one.json().id);
    // Nor does an admin's key meet a team's.
    expect((await post('a', '/v1/jobs', spec('nightly'), 'admin-key')).statusCode).toBe(201);
  });

  it("a batch's key is the caller's too", async () => {
    const body = { jobs: [spec('s1'), spec('s2')] };
    const a = await post('a', '/v1/jobs/batch', body, 'batch-key');
    expect(a.statusCode).toBe(201);
    const b = await post('b', '/v1/jobs/batch', body, 'batch-key');
    expect(b.statusCode).toBe(201);
    const idsA = a.json<{ jobs: { id: string }[] }>().jobs.map((j) => j.id);
    const idsB = b.json<{ jobs: { id: string }[] }>().jobs.map((j) => j.id);
    expect(idsB.filter((id) => idsA.includes(id))).toEqual([]);
    for (const id of idsB) expect((await cp.app.inject({ method: 'GET', url: `/v1/jobs/${id}`, headers: tokens.b })).json().team).toBe('beta');
    expect((await post('b', '/v1/jobs/batch', body, 'batch-key')).json()).toEqual(b.json());
  });
});
