import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ArtifactStore } from '../../src/artifacts/artifact-store.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { cpuMachine } from '../../src/store/conformance/fixtures.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';

/** Limits (issue 8): requests per token, and paths that must stay inside their directory. */
describe('limits', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin = '';
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-limits-'));
    // 2 requests a second, 10 at once, for people's tokens.
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 2 }));
    admin = await makeToken(cp.store, 'admin');
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a token past its rate is answered 429 with Retry-After; another token is not held back', async () => {
    const ml = await makeToken(cp.store, 'team', { team: 'ml' });
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await cp.app.inject({ method: 'GET', url: '/v1/jobs', headers: bearer(ml) })).statusCode);
    expect(statuses.slice(0, 10)).toEqual(Array(10).fill(200));
    const limited = await cp.app.inject({ method: 'GET', url: '/v1/jobs', headers: bearer(ml) });
    expect(limited.statusCode).toBe(429);
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(limited.json()).toMatchObject({
      error: 'rate_limited',
      message: expect.stringMatching(/^too many requests with token tok_\w+: try again in \d+ s$/),
    });
    expect((await cp.app.inject({ method: 'GET', url: '/v1/jobs', headers: bearer(admin) })).statusCode).toBe(200);
  });

  it('an artifact reached through a symbolic link is not served, and no upload goes through one', async () => {
    const m = await registerMachine(cp.store, cpuMachine('links-1'));
    const submitted = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...bearer(admin), 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'links', stages: [{ name: 'a', command: ['true'] }] }),
    });
    const jobId = submitted.json().id as string;
    const s = (await cp.store.jobGet({ jobId }))!.stages[0]!;
    const att = (
      await cp.store.planApply({
        plan: { placements: [{ stageId: s.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
        now: Date.now(),
        leaseMs: 60_000,
      })
    ).applied[0]!;
    const machine = bearer(m.credential);
    await cp.app.inject({
      method: 'POST',
      url: `/v1/agent/attempts/${att.id}/start`,
      headers: { ...machine, 'content-type': 'application/json' },
      payload: JSON.stringify({ token: att.token, pid: null }),
    });
    // Planted on the server's disk, in the attempt's directory as versions before content
    // addressing wrote it (docs/rerun.md): a link to a secret outside, and a directory that leads out.
    const outside = join(dir, 'outside');
    mkdirSync(outside);
    writeFileSync(join(outside, 'secret.txt'), 'not yours');
    const attemptDir = join(dir, 'artifacts', att.id);
    mkdirSync(attemptDir, { recursive: true });
    symlinkSync(join(outside, 'secret.txt'), join(attemptDir, 'leak.txt'));
    symlinkSync(outside, join(attemptDir, 'out'));
    const upload = (path: string) =>
      cp.app.inject({
        method: 'PUT',
        url: `/v1/agent/attempts/${att.id}/outputs/${path}`,
        headers: { ...machine, 'x-gantry-token': String(att.token), 'content-type': 'application/octet-stream' },
        payload: 'written',
      });
    // An upload's path is a name in the manifest; its bytes go to the blob store, never through the planted link.
    expect((await upload('out/planted.txt')).statusCode).toBe(204);
    expect(readdirSync(outside)).toEqual(['secret.txt']);
    expect((await upload('ok.txt')).statusCode).toBe(204);
    // The outcome names the link as an output: it is no uploaded file (nor a file of an earlier version).
    const report = await cp.app.inject({
      method: 'POST',
      url: `/v1/agent/machines/${m.id}/report`,
      headers: { ...machine, 'content-type': 'application/json' },
      payload: JSON.stringify({
        started: [],
        completed: [{ attemptId: att.id, token: att.token, exitCode: 0, signal: null, reason: null, outputs: [{ path: 'leak.txt', size: 9 }] }],
      }),
    });
    expect(report.json().completed[0]).toMatchObject({ result: 'refused', message: expect.stringMatching(/output leak.txt was not uploaded/) });
    // Even committed by a bug as an earlier version's files, a link is not followed when read.
    for (const path of ['leak.txt', 'out/secret.txt']) {
      await cp.store.outputUploaded({ attemptId: att.id, token: att.token, path, blob: ArtifactStore.legacyKey(att.id, path), size: 9, now: Date.now() });
    }
    await cp.store.attemptComplete({
      attemptId: att.id,
      token: att.token,
      exitCode: 0,
      signal: null,
      end: { kind: 'exited' as const, detail: null },
      outputs: [
        { path: 'leak.txt', size: 9 },
        { path: 'out/secret.txt', size: 9 },
        { path: 'ok.txt', size: 7 },
      ],
      now: Date.now(),
      jitter: 0.5,
    });
    const read = (path: string) => cp.app.inject({ method: 'GET', url: `/v1/jobs/${jobId}/stages/a/outputs/${path}`, headers: bearer(admin) });
    expect((await read('leak.txt')).statusCode).toBe(404);
    expect((await read('out/secret.txt')).statusCode).toBe(404);
    expect((await read('ok.txt')).body).toBe('written');
    expect((await read('..%2F..%2Fgantry.db')).statusCode).toBe(400);
  });
});
