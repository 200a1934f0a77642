import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';
import { cpuMachine } from '../../src/store/conformance/fixtures.js';
import { defaultServerConfig } from '../../src/server/server-config.js';

/**
 * Protocol 4, "bad input changes nothing", over generated input: whatever arrives, the API answers
 * a 2xx or a 4xx with a message (never a 500), and a refused request writes nothing.
 */
describe('bad input changes nothing', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-badinput-'));
    // No rate limit: hundreds of requests in a second, each of which must be judged on its body.
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0, agentRateLimitPerSecond: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const counts = async () => {
    const jobs = (await cp.store.jobList({ limit: 1000 })).length;
    const events = (await cp.store.eventsList({ limit: 100_000 })).length;
    const machines = (await cp.store.machineList()).length;
    const tokens = (await cp.store.tokenList({ includeRevoked: true })).length;
    return { jobs, events, machines, tokens };
  };

  const valid = {
    name: 'ok',
    stages: [
      { name: 'a', command: ['true'] },
      { name: 'b', needs: ['a'], command: ['true'] },
    ],
  };
  // Valid specs with one field replaced by anything: the nastiest inputs are near-misses.
  const nearMiss = fc
    .tuple(fc.constantFrom('name', 'team', 'priority', 'labels', 'retry', 'stages', 'x'), fc.jsonValue())
    .map(([k, v]) => ({ ...valid, [k]: v }));
  const stageMiss = fc
    .tuple(fc.constantFrom('name', 'needs', 'resources', 'placement', 'command', 'env', 'timeoutSeconds', 'retry', 'preemptible', 'bogus'), fc.jsonValue())
    .map(([k, v]) => ({ ...valid, stages: [{ ...valid.stages[0], [k]: v }, valid.stages[1]] }));

  it('POST /v1/jobs: 201 or a 4xx naming the problem; nothing written on a 4xx', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.jsonValue(), nearMiss, stageMiss), async (body) => {
        const before = await counts();
        const res = await cp.app.inject({
          method: 'POST',
          url: '/v1/jobs',
          headers: { ...auth, 'content-type': 'application/json' },
          payload: JSON.stringify(body),
        });
        expect(res.statusCode, res.body).not.toBeGreaterThanOrEqual(500);
        if (res.statusCode === 201) return;
        expect(res.statusCode).toBeGreaterThanOrEqual(400);
        expect(res.json().message.length).toBeGreaterThan(0);
        expect(await counts()).toEqual(before);
      }),
      { numRuns: 300 },
    );
  });

  it('YAML text that is not a spec, and garbage bytes, are 4xx too', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ maxLength: 300 }), async (text) => {
        const before = await counts();
        const res = await cp.app.inject({ method: 'POST', url: '/v1/jobs', headers: { ...auth, 'content-type': 'application/yaml' }, payload: text });
        expect(res.statusCode, res.body).toBeLessThan(500);
        if (res.statusCode !== 201) expect(await counts()).toEqual(before);
      }),
      { numRuns: 200 },
    );
  });

  it('every route: unknown ids, stale tokens and malformed bodies are 4xx and change nothing', async () => {
    // Each route with the token it is for, so that what is checked is the body, not the token.
    const join = bearer(await makeToken(cp.store, 'join'));
    const m = await registerMachine(cp.store, cpuMachine('bad-input-1'));
    const machine = bearer(m.credential);
    const routes = [
      { method: 'POST', url: '/v1/agent/register', auth: join },
      { method: 'POST', url: `/v1/agent/machines/${m.id}/heartbeat`, auth: machine },
      { method: 'POST', url: `/v1/agent/machines/${m.id}/report`, auth: machine },
      { method: 'POST', url: '/v1/agent/attempts/att_nope/start', auth: machine },
      { method: 'POST', url: '/v1/agent/attempts/att_nope/logs', auth: machine },
      { method: 'POST', url: '/v1/agent/attempts/att_nope/complete', auth: machine },
      { method: 'POST', url: '/v1/jobs/job_nope/cancel', auth },
      { method: 'GET', url: '/v1/jobs/job_nope', auth },
      { method: 'GET', url: '/v1/jobs/job_nope/stages/a/logs', auth },
      { method: 'GET', url: '/v1/agent/artifacts/att_nope/../../etc/passwd', auth: machine },
      { method: 'POST', url: `/v1/agent/machines/${m.id}/drain`, auth: machine },
      { method: 'POST', url: '/v1/jobs/batch', auth },
      { method: 'POST', url: '/v1/tokens', auth },
      { method: 'POST', url: '/v1/machines/nope/cordon', auth },
      { method: 'POST', url: '/v1/machines/nope/drain', auth },
      { method: 'GET', url: '/v1/audit?since=yesterday', auth },
      { method: 'GET', url: '/v1/jobs/job_nope/stages/a/outputs/..%2F..%2Fsecret', auth },
    ] as const;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...routes), fc.jsonValue(), async (route, body) => {
        const before = await counts();
        const res = await cp.app.inject({
          method: route.method,
          url: route.url,
          headers: route.auth,
          ...(route.method === 'POST' ? { headers: { ...route.auth, 'content-type': 'application/json' }, payload: JSON.stringify(body) } : {}),
        });
        expect(res.statusCode, `${route.url}: ${res.body}`).toBeLessThan(500);
        if (res.statusCode >= 400) expect(await counts()).toEqual(before);
      }),
      { numRuns: 300 },
    );
  });
});
