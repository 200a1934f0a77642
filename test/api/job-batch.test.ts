import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { bearer, makeToken } from '../support/tokens.js';
import { defaultServerConfig } from '../../src/server/server-config.js';

/** `POST /v1/jobs/batch`: many jobs in one request, validated one by one, written all or none. */
describe('POST /v1/jobs/batch', () => {
  let cp: ControlPlane;
  let auth: Record<string, string>;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-batch-'));
    // No rate limit: the fuzzed requests must each be judged on their body.
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0 }));
    auth = bearer(await makeToken(cp.store, 'admin'));
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const counts = async () => ({
    jobs: (await cp.store.jobList({ limit: 1000 })).length,
    events: (await cp.store.eventsList({ limit: 100_000 })).length,
    outbox: (await cp.store.outboxPending({ limit: 100_000 })).length,
  });
  const spec = (name: string) => ({
    name,
    stages: [
      { name: 'prep', command: ['true'] },
      { name: 'train', needs: ['prep'], resources: { gpu: { count: 1 } }, command: ['true'] },
      { name: 'eval', needs: ['train'], command: ['true'] },
    ],
  });
  const post = (payload: unknown, contentType = 'application/json') =>
    cp.app.inject({
      method: 'POST',
      url: '/v1/jobs/batch',
      headers: { ...auth, 'content-type': contentType },
      payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
    });

  it('accepts a batch and answers ids and names in the order given; every job is queued', async () => {
    const names = ['c', 'a', 'b', 'a'];
    const res = await post({ jobs: names.map(spec) });
    expect(res.statusCode, res.body).toBe(201);
    const jobs = res.json().jobs as { id: string; name: string }[];
    expect(jobs.map((j) => j.name)).toEqual(names);
    expect(new Set(jobs.map((j) => j.id)).size).toBe(4);
    for (const [i, j] of jobs.entries()) {
      const job = await cp.store.jobGet({ jobId: j.id });
      expect(job).toMatchObject({ name: names[i], state: 'queued' });
      expect(job!.stages.map((s) => [s.name, s.state])).toEqual([
        ['prep', 'ready'],
        ['train', 'pending'],
        ['eval', 'pending'],
      ]);
    }
  });

  it('accepts YAML text with a top-level jobs list', async () => {
    const yaml = 'jobs:\n  - name: y1\n    stages: [{ name: a, command: [echo, hi] }]\n  - name: y2\n    stages: [{ name: a, command: [echo, hi] }]\n';
    const res = await post(yaml, 'application/yaml');
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().jobs.map((j: { name: string }) => j.name)).toEqual(['y1', 'y2']);
  });

  it('refuses the whole batch when one job is bad, naming each problem with its job index; nothing is written', async () => {
    const before = await counts();
    const bad = spec('bad');
    bad.stages[1] = { ...bad.stages[1]!, command: [] as string[] };
    const worse = { name: 'worse', stages: [{ name: 'a', command: ['true'], needs: ['nope'] }], extra: 1 };
    const res = await post({ jobs: [spec('ok-1'), spec('ok-2'), spec('ok-3'), bad, worse] });
    expect(res.statusCode).toBe(400);
    const body = res.json();
    expect(body.error).toBe('invalid_request');
    expect(body.issues).toEqual(
      expect.arrayContaining([
        { path: '/jobs/3/stages/1/command', message: 'must not be empty' },
        { path: '/jobs/4/extra', message: expect.stringContaining('unknown field "extra"') },
        { path: '/jobs/4/stages/0/needs/0', message: expect.stringContaining('unknown stage "nope"') },
      ]),
    );
    expect(body.issues.every((i: { path: string }) => /^\/jobs\/[34]\//.test(i.path))).toBe(true);
    expect(await counts()).toEqual(before);
  });

  it('refuses more than 10,000 jobs, saying so, and writes nothing', async () => {
    const before = await counts();
    const one = { name: 'j', stages: [{ name: 'a', command: ['true'] }] };
    const res = await post({ jobs: Array.from({ length: 10_001 }, () => one) });
    expect(res.statusCode).toBe(400);
    expect(res.json().issues).toEqual([{ path: '/jobs', message: expect.stringContaining('too many jobs: 10001 (a batch may have at most 10000') }]);
    expect(await counts()).toEqual(before);
  });

  it('refuses an empty batch and a body that is not a batch', async () => {
    expect((await post({ jobs: [] })).json().issues).toEqual([{ path: '/jobs', message: 'must not be empty' }]);
    expect((await post(spec('not-a-batch'))).json().issues.map((i: { path: string }) => i.path)).toEqual(['/name', '/stages']);
    expect((await post([spec('x')])).statusCode).toBe(400);
  });

  it('has a body limit of its own (32 MiB, 413 beyond), while a single job keeps 1 MiB', async () => {
    const before = await counts();
    const filler = 'x'.repeat(33 * 2 ** 20);
    const big = await post(`{"jobs":[{"name":"big","stages":[{"name":"a","command":["${filler}"]}]}]}`);
    expect(big.statusCode).toBe(413);
    expect(big.json()).toEqual({ error: 'body_too_large', message: 'request body is over the limit of 33554432 bytes (32 MiB)' });
    // 2 MiB: fine for a batch, too big for one job.
    const two = 'x'.repeat(2 * 2 ** 20);
    const single = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'big', stages: [{ name: 'a', command: [two] }] }),
    });
    expect(single.statusCode).toBe(413);
    // 2 MiB in twenty jobs (one argument may hold 128 KiB: docs/security.md).
    const part = 'x'.repeat(100 * 1024);
    const batch = await post({ jobs: Array.from({ length: 20 }, (_, i) => ({ name: `big-${i}`, stages: [{ name: 'a', command: [part] }] })) });
    expect(batch.statusCode, batch.body).toBe(201);
    const yaml = await post(
      `jobs:\n${Array.from({ length: 20 }, (_, i) => `  - { name: big-${i}, stages: [{ name: a, command: [${part}] }] }\n`).join('')}`,
      'application/yaml',
    );
    expect(yaml.statusCode, yaml.body).toBe(201);
    expect((await post(`jobs: [${filler}]`, 'application/yaml')).statusCode).toBe(413);
    expect((await counts()).jobs).toBe(before.jobs + 40);
  });

  it('whatever arrives gets a 201 or a 4xx with a message, and a 4xx writes nothing', async () => {
    const valid = spec('ok');
    const nearMiss = fc.tuple(fc.constantFrom('name', 'stages', 'priority', 'x'), fc.jsonValue()).map(([k, v]) => ({ ...valid, [k]: v }));
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.jsonValue(),
          fc.array(fc.oneof(fc.constant(valid), nearMiss, fc.jsonValue()), { maxLength: 5 }).map((jobs) => ({ jobs })),
        ),
        async (body) => {
          const before = await counts();
          const res = await post(body);
          expect(res.statusCode, res.body).toBeLessThan(500);
          if (res.statusCode === 201) return;
          expect(res.statusCode).toBeGreaterThanOrEqual(400);
          expect(res.json().message.length).toBeGreaterThan(0);
          expect(await counts()).toEqual(before);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('is described in the OpenAPI document', async () => {
    const doc = (await cp.app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const op = doc.paths['/v1/jobs/batch'].post;
    expect(op.summary).toBe('Submit many jobs at once');
    expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['201', '400', '413']));
    expect(op.requestBody.content['application/json'].schema.properties.jobs.maxItems).toBe(10_000);
  });
});
