import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newTokenId, newTokenSecret, tokenHash } from '../../src/api/auth/token-secret.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from '../support/tokens.js';

/**
 * Who may do what (issue 8, docs/security.md): every route against every kind of token, teams
 * against each other's jobs, machines against each other's attempts. In process, through the
 * real routes (inject); the control plane is not started, so the test places stages itself.
 */
describe('authentication and authorization', () => {
  let cp: ControlPlane;
  let dir: string;
  const t = { admin: '', ml: '', vision: '', join: '' };
  const now = () => Date.now();

  type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
  const call = (method: Method, url: string, token: string | null, body?: unknown) =>
    cp.app.inject({
      method,
      url,
      headers: { ...(token ? bearer(token) : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { payload: JSON.stringify(body) } : {}),
    });
  const registration = (name: string) => ({
    name,
    cpuMillis: 4000,
    memoryBytes: 8 * 2 ** 30,
    gpus: [],
    gpusDeclared: false,
    region: null,
    labels: {},
    agent: { version: 'test', host: 'test', pid: 1 },
  });
  const join_ = async (name: string, token = t.join) => {
    const r = await call('POST', '/v1/agent/register', token, registration(name));
    expect(r.statusCode, r.body).toBe(200);
    return r.json<{ machineId: string; credential: string }>();
  };
  const submit = async (token: string, spec: object) => {
    const r = await call('POST', '/v1/jobs', token, spec);
    expect(r.statusCode, r.body).toBe(201);
    return r.json<{ id: string; team: string }>();
  };
  const oneStage = (name: string, extra: object = {}) => ({
    name,
    stages: [{ name: 'a', command: ['true'], resources: { cpu: 1, memory: '64Mi' } }],
    ...extra,
  });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-auth-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    t.admin = await makeToken(cp.store, 'admin');
    t.ml = await makeToken(cp.store, 'team', { team: 'ml' });
    t.vision = await makeToken(cp.store, 'team', { team: 'vision' });
    t.join = await makeToken(cp.store, 'join');
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('no token, a malformed one, an unknown one: 401 saying how to send one; the health check and the API document are open', async () => {
    const none = await call('GET', '/v1/jobs', null);
    expect(none.statusCode).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer realm="gantry"');
    expect(none.json()).toMatchObject({ error: 'unauthenticated', message: expect.stringMatching(/Authorization: Bearer <token>.*GANTRY_TOKEN/) });
    const malformed = await cp.app.inject({ method: 'GET', url: '/v1/jobs', headers: { authorization: `Basic ${t.admin}` } });
    expect(malformed.statusCode).toBe(401);
    expect((await call('GET', '/v1/jobs', newTokenSecret('admin'))).json()).toEqual({
      error: 'unauthenticated',
      message: 'the token is not known to this server',
    });
    expect((await call('GET', '/healthz', null)).statusCode).toBe(200);
    expect((await call('GET', '/openapi.json', null)).statusCode).toBe(200);
  });

  it('the health check can be closed too (GANTRY_HEALTH_OPEN=0)', async () => {
    const closedDir = mkdtempSync(join(tmpdir(), 'gantry-auth-closed-'));
    const closed = await createControlPlane(defaultServerConfig({ dataDir: closedDir, port: 0, openHealth: false }));
    try {
      expect((await closed.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(401);
      const token = await makeToken(closed.store, 'team', { team: 'ops' });
      expect((await closed.app.inject({ method: 'GET', url: '/healthz', headers: bearer(token) })).statusCode).toBe(200);
    } finally {
      await closed.stop();
      rmSync(closedDir, { recursive: true, force: true });
    }
  });

  it('a revoked token is refused from its next request on; an expired one too', async () => {
    const made = await call('POST', '/v1/tokens', t.admin, { kind: 'team', team: 'ml', name: 'short-lived' });
    expect(made.statusCode).toBe(201);
    const { token, info } = made.json<{ token: string; info: { id: string; kind: string; team: string } }>();
    expect(token).toMatch(/^gantry_team_[0-9a-z]{32}$/);
    expect(info).toMatchObject({ kind: 'team', team: 'ml', name: 'short-lived', revokedAt: null });
    expect((await call('GET', '/v1/jobs', token)).statusCode).toBe(200);
    const listed = (await call('GET', '/v1/tokens', t.admin)).json<{ tokens: { id: string }[] }>();
    expect(listed.tokens.map((x) => x.id)).toContain(info.id);
    expect(JSON.stringify(listed)).not.toContain(token);
    const revoked = await call('DELETE', `/v1/tokens/${info.id}`, t.admin);
    expect(revoked.json()).toMatchObject({ changed: true, token: { id: info.id } });
    expect((await call('DELETE', `/v1/tokens/${info.id}`, t.admin)).json()).toMatchObject({ changed: false });
    const after = await call('GET', '/v1/jobs', token);
    expect(after.statusCode).toBe(401);
    expect(after.json().message).toBe(`token ${info.id} (short-lived) was revoked`);
    expect((await call('DELETE', '/v1/tokens/tok_nope', t.admin)).statusCode).toBe(404);

    const expired = newTokenSecret('team');
    await cp.store.tokenCreate({
      id: newTokenId(now()),
      kind: 'team',
      team: 'ml',
      name: 'old',
      hash: tokenHash(expired),
      expiresAt: now() - 1000,
      now: now() - 2000,
    });
    expect((await call('GET', '/v1/jobs', expired)).json().message).toMatch(/^token tok_\w+ \(old\) expired at /);
  });

  it('each kind of token reaches only its routes: 403 saying which it needs', async () => {
    const m = await join_('kinds-1');
    const cases: [Method, string, string, number][] = [
      // [method, url, token, status]
      ['POST', '/v1/tokens', t.ml, 403],
      ['GET', '/v1/tokens', t.ml, 403],
      ['POST', '/v1/machines/kinds-1/cordon', t.ml, 403],
      ['DELETE', '/v1/machines/kinds-1', t.ml, 403],
      ['GET', '/v1/machines', t.ml, 200],
      ['GET', '/v1/jobs', t.join, 403],
      ['GET', '/v1/machines', t.join, 403],
      ['GET', '/v1/jobs', m.credential, 403],
      ['POST', `/v1/agent/machines/${m.machineId}/heartbeat`, t.admin, 403],
      ['POST', `/v1/agent/machines/${m.machineId}/heartbeat`, t.ml, 403],
      ['POST', `/v1/agent/machines/${m.machineId}/heartbeat`, t.join, 403],
      ['POST', `/v1/agent/machines/${m.machineId}/heartbeat`, m.credential, 200],
      ['POST', '/v1/agent/register', t.ml, 403],
    ];
    for (const [method, url, token, status] of cases) {
      const body =
        method === 'POST'
          ? url.endsWith('heartbeat')
            ? { running: [] }
            : url.endsWith('register')
              ? registration('kinds-2')
              : url === '/v1/tokens'
                ? { kind: 'join', name: 'x' }
                : {}
          : undefined;
      const r = await call(method, url, token, body);
      expect(r.statusCode, `${method} ${url}: ${r.body}`).toBe(status);
      if (status === 403) expect(r.json()).toMatchObject({ error: 'forbidden', message: expect.stringMatching(/needs|for agents/) });
    }
  });

  it("another team's job is not found, on every route; a team's list holds its own jobs only; admin sees all", async () => {
    const mine = await submit(t.ml, oneStage('ml-job'));
    expect(mine.team).toBe('ml');
    const theirs = await submit(t.vision, oneStage('vision-job'));
    const byAdmin = await submit(t.admin, oneStage('admin-job', { team: 'research' }));
    expect(byAdmin.team).toBe('research');
    for (const [method, url] of [
      ['GET', `/v1/jobs/${theirs.id}`],
      ['POST', `/v1/jobs/${theirs.id}/cancel`],
      ['GET', `/v1/jobs/${theirs.id}/events`],
      ['GET', `/v1/jobs/${theirs.id}/stages/a/logs`],
      ['GET', `/v1/jobs/${theirs.id}/stages/a/logs?format=json`],
      ['GET', `/v1/jobs/${theirs.id}/stages/a/outputs/out.txt`],
    ] as [Method, string][]) {
      const r = await call(method, url, t.ml, method === 'POST' ? {} : undefined);
      expect(r.statusCode, `${method} ${url}`).toBe(404);
      // Exactly what a job that does not exist answers: nothing says it is there.
      expect(r.json()).toEqual({ error: 'not_found', message: `job ${theirs.id} not found` });
    }
    expect((await call('GET', `/v1/jobs/${theirs.id}`, t.admin)).json().state).not.toBe('canceled');
    expect((await call('GET', `/v1/jobs/${mine.id}`, t.ml)).statusCode).toBe(200);
    expect((await call('GET', `/v1/jobs/${mine.id}/events`, t.ml)).statusCode).toBe(200);
    const ids = (token: string, q = '') => call('GET', `/v1/jobs${q}`, token).then((r) => r.json<{ jobs: { id: string }[] }>().jobs.map((j) => j.id));
    expect(await ids(t.ml)).toEqual([mine.id]);
    expect(await ids(t.ml, '?team=vision')).toEqual([]);
    expect(await ids(t.vision)).toEqual([theirs.id]);
    expect(new Set(await ids(t.admin))).toEqual(new Set([mine.id, theirs.id, byAdmin.id]));
    expect((await call('POST', `/v1/jobs/${mine.id}/cancel`, t.ml, {})).json()).toMatchObject({ changed: true, job: { state: 'canceled' } });
  });

  it('a team token submits for its own team only: another team named is refused, and nothing is written', async () => {
    const count = async () => (await cp.store.jobList({ limit: 1000 })).length;
    const before = await count();
    const r = await call('POST', '/v1/jobs', t.ml, oneStage('sneaky', { team: 'vision' }));
    expect(r.statusCode).toBe(403);
    expect(r.json().message).toBe('/team: a token of team ml submits for team ml only, not vision');
    const batch = await call('POST', '/v1/jobs/batch', t.ml, { jobs: [oneStage('fine'), oneStage('sneaky', { team: 'vision' })] });
    expect(batch.statusCode).toBe(403);
    expect(batch.json().message).toMatch(/^\/jobs\/1\/team: /);
    expect(await count()).toBe(before);
    const named = await call('POST', '/v1/jobs/batch', t.ml, { jobs: [oneStage('own', { team: 'ml' }), oneStage('unnamed')] });
    expect(named.statusCode).toBe(201);
  });

  it('a machine speaks only for itself: not for another machine, not about its attempts, not under its name', async () => {
    const m1 = await join_('imp-1');
    const m2 = await join_('imp-2');
    const job = await submit(t.admin, oneStage('placed-on-m2'));
    const stage = (await cp.store.jobGet({ jobId: job.id }))!.stages[0]!;
    const plan = { placements: [{ stageId: stage.id, machineId: m2.machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 26 }], pending: [] };
    const att = (await cp.store.planApply({ plan, now: now(), leaseMs: 60_000 })).applied[0]!;

    // Another machine's routes.
    const hb = await call('POST', `/v1/agent/machines/${m2.machineId}/heartbeat`, m1.credential, { running: [] });
    expect(hb.statusCode).toBe(403);
    expect(hb.json().message).toBe(`the credential of machine ${m1.machineId} cannot speak for machine ${m2.machineId}`);
    expect((await call('POST', `/v1/agent/machines/${m2.machineId}/report`, m1.credential, { started: [], completed: [] })).statusCode).toBe(403);
    // Another machine's attempt, reported as its own: stale, and nothing changes.
    const r = await call('POST', `/v1/agent/machines/${m1.machineId}/report`, m1.credential, {
      started: [{ attemptId: att.id, token: att.token, pid: null }],
      completed: [],
    });
    expect(r.json().started[0]).toMatchObject({ result: 'stale', message: 'attempt is placed on another machine' });
    for (const [url, body] of [
      [`/v1/agent/attempts/${att.id}/start`, { token: att.token, pid: null }],
      [`/v1/agent/attempts/${att.id}/logs`, { token: att.token, chunks: [{ stream: 'stdout', offset: 0, bytes: 3, data: 'hi\n' }] }],
      [`/v1/agent/attempts/${att.id}/complete`, { token: att.token, exitCode: 0, signal: null, reason: null, outputs: [] }],
    ] as [string, object][]) {
      const res = await call('POST', url, m1.credential, body);
      expect(res.statusCode, url).toBe(409);
      expect(res.json().message).toMatch(/placed on another machine/);
    }
    expect((await cp.store.attemptGet({ attemptId: att.id }))!.state).toBe('scheduled');
    // Its owner can.
    expect((await call('POST', `/v1/agent/attempts/${att.id}/start`, m2.credential, { token: att.token, pid: null })).json()).toEqual({ state: 'running' });
    // Another machine's name.
    const reg = await call('POST', '/v1/agent/register', m1.credential, registration('imp-2'));
    expect(reg.statusCode).toBe(403);
    expect(reg.json().message).toBe(`the credential of machine imp-1 cannot register machine imp-2`);
  });

  it("a join token cannot take a live machine's name; once the machine is lost it can, and the old credential stops working", async () => {
    const first = await join_('take-1');
    // Again with its own credential: the same machine, the same credential.
    const again = await call('POST', '/v1/agent/register', first.credential, registration('take-1'));
    expect(again.json()).toMatchObject({ machineId: first.machineId });
    expect(again.json().credential).toBeUndefined();
    const taken = await call('POST', '/v1/agent/register', t.join, registration('take-1'));
    expect(taken.statusCode).toBe(409);
    expect(taken.json().message).toMatch(/^machine take-1 is registered and its agent is alive \(ready\)/);
    // Lost: silent past the loss period.
    await cp.store.machinesReap({ now: now() + 3_600_000, suspectAfterMs: 1000, lostAfterMs: 2000, jitter: 0.5 });
    const rejoined = await join_('take-1');
    expect(rejoined.machineId).toBe(first.machineId);
    expect(rejoined.credential).not.toBe(first.credential);
    const old = await call('POST', `/v1/agent/machines/${first.machineId}/heartbeat`, first.credential, { running: [] });
    expect(old.statusCode).toBe(401);
    expect(old.json().message).toMatch(/was revoked/);
    expect((await call('POST', `/v1/agent/machines/${first.machineId}/heartbeat`, rejoined.credential, { running: [] })).statusCode).toBe(200);
  });
});
