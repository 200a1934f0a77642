import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { MAX_BATCH_BYTES, MAX_SPEC_BYTES } from '../../src/spec/spec-limits.js';
import { bearer, makeToken } from '../support/tokens.js';

/**
 * Issue 28: nested, aliased and oversized YAML and JSON, generated from a fixed seed, sent over
 * HTTP to every route that takes a spec while another client keeps asking for the job list.
 * Every answer is 400 or 413 (never a 500, never a crash), nothing is written, and the other
 * client's requests keep their latency. Before the bounds, one such body froze the API for
 * seconds or ended the process.
 */
describe('spec fuzz: attack bodies on every spec route', () => {
  let cp: ControlPlane;
  let dir: string;
  let auth: Record<string, string>;
  let jobId = '';
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-spec-fuzz-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 0 }));
    await cp.start();
    auth = bearer(await makeToken(cp.store, 'team', { team: 'ml' }));
    const made = await send('/v1/jobs', 'application/json', JSON.stringify({ name: 'first', stages: [{ name: 'a', command: ['true'] }] }));
    jobId = ((await made.json()) as { id: string }).id;
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const send = (path: string, type: string, body: string | Uint8Array<ArrayBuffer>) =>
    fetch(`${cp.url}${path}`, { method: 'POST', headers: { ...auth, 'content-type': type }, body });

  type Format = 'yaml' | 'json';
  /** An attack as a value (written in the body's format) placed where a spec's value goes. */
  const attack = fc.oneof(
    // Deep brackets, closed or not: up to 4 MB (the issue's crash took 1-4 MB).
    fc.record({
      kind: fc.constant('nested' as const),
      depth: fc.oneof(fc.integer({ min: 33, max: 2000 }), fc.integer({ min: 100_000, max: 4_000_000 })),
      closed: fc.boolean(),
    }),
    // Deep indentation (YAML only; JSON gets brackets).
    fc.record({ kind: fc.constant('indented' as const), depth: fc.integer({ min: 33, max: 3000 }) }),
    // Flat lists of more values than a batch may hold.
    fc.record({ kind: fc.constant('flat' as const), count: fc.integer({ min: 500_001, max: 700_000 }) }),
    // Aliases of aliases (YAML), past the alias bound.
    fc.record({ kind: fc.constant('laughs' as const), levels: fc.integer({ min: 11, max: 40 }) }),
    // A string past the route's size limit.
    fc.record({ kind: fc.constant('oversized' as const), extra: fc.integer({ min: 1, max: 1 << 20 }) }),
  );
  type Attack = typeof attack extends fc.Arbitrary<infer A> ? A : never;

  function value(a: Attack, format: Format, limit: number): string {
    switch (a.kind) {
      case 'nested':
        return '['.repeat(a.depth) + (a.closed ? ']'.repeat(a.depth) : '');
      case 'indented':
        return format === 'json'
          ? '{"k":'.repeat(a.depth) + '1' + '}'.repeat(a.depth)
          : '\n' + Array.from({ length: a.depth }, (_, i) => `${' '.repeat(i + 8)}k:`).join('\n');
      case 'flat':
        return `[${'0,'.repeat(a.count)}0]`;
      case 'laughs':
        return format === 'json'
          ? `[${'[0,'.repeat(40)}0${']'.repeat(40)}]`
          : `&l0 [x, x, x, x, x, x, x, x, x, x]\n${Array.from({ length: a.levels }, (_, i) => `        y${i}: &l${i + 1} [${Array(10).fill(`*l${i}`).join(', ')}]`).join('\n')}`;
      case 'oversized':
        return `"${'x'.repeat(limit + a.extra)}"`;
    }
  }

  const stage = '{"name": "a", "command": ["true"]}';
  /** The body of `route` with `v` as a label's value, in `format`. */
  function body(route: 'submit' | 'batch' | 'rerun', format: Format, v: string): string {
    const spec = format === 'json' ? `{"name": "first", "stages": [${stage}], "labels": {"x": ${v}}}` : null;
    switch (route) {
      case 'submit':
        return spec ?? `name: first\nstages: [${stage}]\nlabels:\n  x: ${v}\n`;
      case 'batch':
        return spec ? `{"jobs": [${spec}]}` : `jobs:\n  - name: first\n    stages: [${stage}]\n    labels:\n      x: ${v}\n`;
      case 'rerun':
        return spec ? `{"dryRun": true, "cancelRunning": true, "spec": ${spec}}` : `spec:\n  name: first\n  labels:\n    x: ${v}\n`;
    }
  }

  const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))]!;
  /**
   * Another client: GET /v1/jobs every 10 ms until `until` settles, each request's milliseconds from
   * when it was due. This client shares the server's process: counted from its sending, a request
   * whose timer fired late because the event loop was held would look fast.
   */
  async function probe(until: Promise<unknown> | number): Promise<number[]> {
    const ms: number[] = [];
    let done = false;
    if (typeof until === 'number') setTimeout(() => (done = true), until);
    else void until.finally(() => (done = true));
    let due = performance.now();
    while (!done) {
      const res = await fetch(`${cp.url}/v1/jobs?limit=5`, { headers: auth });
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      ms.push(performance.now() - due);
      due = performance.now() + 10;
      await new Promise((r) => setTimeout(r, 10));
    }
    return ms;
  }

  it('every answer is 400 or 413, nothing is written, and another client keeps its latency', async () => {
    const jobsBefore = (await cp.store.jobList({ limit: 1000 })).length;
    const quiet = await probe(1500);

    const cases = fc.sample(
      fc.tuple(fc.constantFrom('submit' as const, 'batch' as const, 'rerun' as const), fc.constantFrom('yaml' as const, 'json' as const), attack),
      {
        seed: 28,
        numRuns: 60,
      },
    );
    // Made before the attack: the test shares the server's process, and building them would hold its event loop too.
    const requests = cases.map(([route, format, a]) => {
      const limit = route === 'batch' ? MAX_BATCH_BYTES : MAX_SPEC_BYTES;
      const path = route === 'submit' ? '/v1/jobs' : route === 'batch' ? '/v1/jobs/batch' : `/v1/jobs/${jobId}/rerun`;
      return { route, format, a, path, payload: new TextEncoder().encode(body(route, format, value(a, format, limit))) };
    });
    const answers: { route: string; format: Format; kind: string; bytes: number; status: number; ms: number; message: string }[] = [];
    const attackDone = (async () => {
      for (const { route, format, a, path, payload } of requests) {
        const t0 = performance.now();
        const res = await send(path, format === 'json' ? 'application/json' : 'application/yaml', payload);
        const answer = (await res.json()) as { message?: string };
        answers.push({ route, format, kind: a.kind, bytes: payload.length, status: res.status, ms: performance.now() - t0, message: answer.message ?? '' });
      }
    })();
    const attacked = await probe(attackDone);
    await attackDone;

    for (const a of answers) {
      expect([400, 413], JSON.stringify(a)).toContain(a.status);
      expect(a.message.length, JSON.stringify(a)).toBeGreaterThan(0);
    }
    // Every kind of attack was sent to every route.
    expect(new Set(answers.map((a) => `${a.route} ${a.kind}`)).size).toBeGreaterThanOrEqual(12);
    expect((await cp.store.jobList({ limit: 1000 })).length).toBe(jobsBefore);
    expect((await fetch(`${cp.url}/healthz`)).status).toBe(200);

    const summary = {
      quietP50: percentile(quiet, 50),
      attackedP50: percentile(attacked, 50),
      attackedP95: percentile(attacked, 95),
      attackedMax: Math.max(...attacked),
      probes: attacked.length,
      slowestRefusals: [...answers]
        .sort((x, y) => y.ms - x.ms)
        .slice(0, 3)
        .map((a) => `${a.route} ${a.format} ${a.kind} ${a.bytes} B: ${a.status} in ${Math.round(a.ms)} ms`),
    };
    console.log(`spec fuzz latency (ms): ${JSON.stringify(summary, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v) : v))}`);
    // Generous, for two shared cores: a frozen server (seconds a body, as before the bounds) fails these.
    expect(attacked.length).toBeGreaterThanOrEqual(5);
    expect(summary.attackedP50).toBeLessThan(Math.max(400, 10 * summary.quietP50));
    expect(summary.attackedMax).toBeLessThan(3000);
  });

  it('a large YAML spec within the bounds is read off the event loop: taken, while another client keeps its latency', async () => {
    // About 0.8 MiB and 80,000 values: the parser's seconds on two busy cores, once held every request.
    const stages = Array.from({ length: 80 }, (_, i) => `  - name: s${i}\n    command: [${Array.from({ length: 1000 }, (_, j) => `--a${j}=1`).join(', ')}]\n`);
    const text = `name: large\nstages:\n${stages.join('')}`;
    expect(text.length).toBeGreaterThan(750_000);
    const quiet = await probe(1000);
    const submitted = send('/v1/jobs', 'application/yaml', text);
    const during = await probe(submitted);
    const res = await submitted;
    expect(res.status, await res.text()).toBe(201);
    const summary = { quietP50: percentile(quiet, 50), p50: percentile(during, 50), max: Math.max(...during), probes: during.length };
    console.log(`large YAML spec, another client's latency (ms): ${JSON.stringify(summary, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v) : v))}`);
    expect(summary.p50).toBeLessThan(Math.max(400, 10 * summary.quietP50));
  });
});
