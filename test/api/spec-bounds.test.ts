import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { MAX_BATCH_BYTES, MAX_BATCH_JSON_NODES, MAX_BATCH_NODES, MAX_SPEC_BYTES } from '../../src/spec/spec-limits.js';
import { bearer, makeToken } from '../support/tokens.js';

/**
 * Issue 28, "one team-token request kills the server": every route that takes a spec reads it
 * within bounds, YAML and JSON alike, and answers 400 naming the bound and its line (or 413 over
 * the size) without writing anything. The same bodies by the thousand: spec-fuzz.test.ts.
 */
describe('spec routes refuse bodies past the bounds', () => {
  let cp: ControlPlane;
  let dir: string;
  let auth: Record<string, string>;
  let jobId = '';
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-spec-bounds-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0 }));
    auth = bearer(await makeToken(cp.store, 'team', { team: 'ml' }));
    jobId = (await post('/v1/jobs', 'json', JSON.stringify({ name: 'first', stages: [{ name: 'a', command: ['true'] }] }))).json().id as string;
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const post = (url: string, kind: 'json' | 'yaml', payload: string) =>
    cp.app.inject({ method: 'POST', url, headers: { ...auth, 'content-type': kind === 'json' ? 'application/json' : 'application/yaml' }, payload });
  const jobCount = async () => (await cp.store.jobList({ limit: 1000 })).length;
  const stage = '{ "name": "a", "command": ["true"] }';

  /** Each route with a body holding `inner` where a spec's value goes, as YAML text and as JSON. */
  const routes = [
    {
      route: 'POST /v1/jobs',
      url: () => '/v1/jobs',
      yaml: (inner: string) => `name: j\nstages: [${stage}]\nlabels:\n  x: ${inner}\n`,
      json: (inner: string) => `{"name": "j", "stages": [${stage}], "labels": {"x": ${inner}}}`,
    },
    {
      route: 'POST /v1/jobs/batch',
      url: () => '/v1/jobs/batch',
      yaml: (inner: string) => `jobs:\n  - name: j\n    stages: [${stage}]\n    labels:\n      x: ${inner}\n`,
      json: (inner: string) => `{"jobs": [{"name": "j", "stages": [${stage}], "labels": {"x": ${inner}}}]}`,
    },
    {
      route: 'POST /v1/jobs/:id/rerun',
      url: () => `/v1/jobs/${jobId}/rerun`,
      yaml: null,
      json: (inner: string) => `{"dryRun": true, "cancelRunning": true, "spec": {"name": "first", "stages": [${stage}], "labels": {"x": ${inner}}}}`,
    },
  ];

  for (const r of routes) {
    describe(r.route, () => {
      it('a body nested a million deep (JSON) is 400, naming the bound and its line; nothing written', async () => {
        const before = await jobCount();
        const res = await post(r.url(), 'json', r.json(`${'['.repeat(500_000)}${']'.repeat(500_000)}`));
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json()).toMatchObject({
          error: 'invalid_request',
          message: expect.stringMatching(/^line 1, column \d+: the body nests deeper than 32 levels/),
        });
        expect(await jobCount()).toBe(before);
      });

      it('a JSON body of too many values is 400', async () => {
        const res = await post(r.url(), 'json', r.json(`[${'0,'.repeat(r.route.includes('batch') ? MAX_BATCH_JSON_NODES + 1 : 100_001)}0]`));
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json().message).toMatch(/has more than \d+ values/);
      });

      if (r.yaml) {
        const yaml = r.yaml;
        it('YAML nested deep is 400 with its line, in brackets and in indentation', async () => {
          const before = await jobCount();
          const flow = await post(r.url(), 'yaml', yaml('['.repeat(400_000)));
          expect(flow.statusCode, flow.body).toBe(400);
          expect(flow.json().message).toMatch(/^line \d, column \d+: the (spec|batch) nests deeper than 32 levels/);
          const block = await post(r.url(), 'yaml', yaml(`\n${Array.from({ length: 60 }, (_, i) => `${' '.repeat(i + 6)}k:`).join('\n')}`));
          expect(block.statusCode, block.body).toBe(400);
          expect(block.json().message).toMatch(/^line \d+, column \d+: .* nests deeper than 32 levels/);
          expect(await jobCount()).toBe(before);
        });

        it('a billion laughs, and too many values, are 400', async () => {
          const laughs = yaml(
            `&a [x, x, x, x, x, x, x, x, x, x]\n${Array.from(
              { length: 12 },
              (_, i) =>
                `  y${i}: &l${i} [${Array(10)
                  .fill(i ? `*l${i - 1}` : '*a')
                  .join(', ')}]`,
            ).join('\n')}`,
          );
          const res = await post(r.url(), 'yaml', laughs);
          expect(res.statusCode, res.body).toBe(400);
          expect(res.json().message).toMatch(/more than 100 YAML aliases/);
          const flat = await post(r.url(), 'yaml', yaml(`[${'0,'.repeat(r.route.includes('batch') ? 500_001 : 100_001)}0]`));
          expect(flat.statusCode, flat.body).toBe(400);
          expect(flat.json().message).toMatch(/has more than \d+ values/);
        });
      }

      it('a body over the size limit is 413', async () => {
        const limit = r.route.includes('batch') ? MAX_BATCH_BYTES : MAX_SPEC_BYTES;
        const res = await post(r.url(), 'json', r.json(`"${'x'.repeat(limit)}"`));
        expect(res.statusCode, res.body).toBe(413);
        expect(res.json()).toMatchObject({ error: 'body_too_large' });
      });

      it('a spec within the bounds is still taken', async () => {
        const res = await post(r.url(), 'json', r.json('"fine"'));
        expect(res.statusCode, res.body).toBeLessThan(300);
      });
    });
  }

  it('a JSON batch may hold more values than a YAML one: 10,000 jobs of 60 values each are read (the YAML bound, 500,000, is past)', async () => {
    const job = (i: number) => ({
      name: `j${i}`,
      stages: [{ name: 'a', command: ['sh', '-c', 'true'], env: Object.fromEntries(Array.from({ length: 25 }, (_, k) => [`K${k}`, `${k}`])) }],
    });
    const body = JSON.stringify({ jobs: Array.from({ length: 10_000 }, (_, i) => job(i)) });
    const before = await jobCount();
    const res = await post('/v1/jobs/batch', 'json', body);
    expect(res.statusCode, res.body.slice(0, 300)).toBe(201);
    expect(res.json().jobs).toHaveLength(10_000);
    expect(MAX_BATCH_NODES).toBeLessThan(10_000 * 60);
    expect(await cp.store.jobList({ limit: 20_000 })).toHaveLength(before + 10_000);
  });
});
