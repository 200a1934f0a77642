import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken, registerMachine } from '../support/tokens.js';
import { cpuMachine } from '../../src/store/conformance/fixtures.js';

/** The audit log (issue 8): every change a person asks for, with who, what, when and the result. */
describe('audit log', () => {
  let cp: ControlPlane;
  let dir: string;
  const t = { admin: '', ml: '' };
  const call = (method: 'GET' | 'POST' | 'DELETE', url: string, token: string | null, body?: unknown, extra: Record<string, string> = {}) =>
    cp.app.inject({
      method,
      url,
      headers: { ...(token ? bearer(token) : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...extra },
      ...(body !== undefined ? { payload: JSON.stringify(body) } : {}),
    });
  const entries = async () =>
    (await call('GET', '/v1/audit', t.admin)).json().entries as {
      action: string;
      target: string | null;
      result: string;
      actor: string;
      tokenId: string | null;
    }[];
  const spec = { name: 'audited', stages: [{ name: 'a', command: ['true'] }] };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-audit-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    t.admin = await makeToken(cp.store, 'admin');
    t.ml = await makeToken(cp.store, 'team', { team: 'ml' });
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a change writes its row with it; a refused request writes one saying why, and nothing else', async () => {
    const mlTokenId = (await cp.store.tokenList({})).find((x) => x.team === 'ml')!.id;
    const job = (await call('POST', '/v1/jobs', t.ml, spec)).json<{ id: string }>();
    const refused = await call('POST', '/v1/jobs', t.ml, { ...spec, team: 'vision' });
    expect(refused.statusCode).toBe(403);
    const invalid = await call('POST', '/v1/jobs', t.ml, { name: 'x', stages: [] });
    expect(invalid.statusCode).toBe(400);
    // The same Idempotency-Key for another request: refused inside the store's transaction.
    await call('POST', '/v1/jobs', t.ml, spec, { 'idempotency-key': 'k-1' });
    const conflict = await call('POST', '/v1/jobs', t.ml, { ...spec, name: 'other' }, { 'idempotency-key': 'k-1' });
    expect(conflict.statusCode).toBe(409);
    await call('POST', `/v1/jobs/${job.id}/cancel`, t.ml, {});
    const rows = (await entries()).filter((e) => e.action.startsWith('job.'));
    expect(rows.map((e) => [e.action, e.result.replace(/:.*/s, '')])).toEqual([
      ['job.submit', 'ok'],
      ['job.submit', 'refused'],
      ['job.submit', 'refused'],
      ['job.submit', 'ok'],
      ['job.submit', 'refused'],
      ['job.cancel', 'ok'],
    ]);
    expect(rows[0]).toEqual({
      seq: expect.any(Number),
      at: expect.any(String),
      tokenId: mlTokenId,
      actor: `team ml token ${mlTokenId} (test team)`,
      action: 'job.submit',
      target: job.id,
      result: 'ok',
      count: 1,
      lastAt: expect.any(String),
    });
    expect(rows[1]!.result).toBe('refused: 403 forbidden: /team: a token of team ml submits for team ml only, not vision');
    expect(rows[2]!.result).toMatch(/^refused: 400 invalid_request: /);
    expect(rows[4]!.result).toMatch(/^refused: 409 conflict: Idempotency-Key "k-1"/);
    expect(rows[5]).toMatchObject({ target: job.id, result: 'ok' });
    // Three jobs were asked for and refused: none of them is there.
    expect((await cp.store.jobList({ limit: 100 })).map((j) => j.name).sort()).toEqual(['audited', 'audited']);
  });

  it('machines, tokens and joining are audited; a request with no valid token is not (nobody to name); only admins read it', async () => {
    const before = (await entries()).length;
    await registerMachine(cp.store, cpuMachine('a-1'));
    expect((await call('POST', '/v1/machines/a-1/cordon', t.admin, {})).statusCode).toBe(200);
    expect((await call('POST', '/v1/machines/a-1/cordon', t.ml, {})).statusCode).toBe(403);
    const made = (await call('POST', '/v1/tokens', t.admin, { kind: 'join', name: 'nodes' })).json<{ token: string; info: { id: string } }>();
    const reg = {
      name: 'a-2',
      cpuMillis: 1000,
      memoryBytes: 2 ** 30,
      gpus: [],
      gpusDeclared: false,
      region: null,
      labels: {},
      agent: { version: 't', host: 't', pid: 1 },
    };
    expect((await call('POST', '/v1/agent/register', made.token, reg)).statusCode).toBe(200);
    expect((await call('DELETE', `/v1/tokens/${made.info.id}`, t.admin)).statusCode).toBe(200);
    expect((await call('POST', '/v1/jobs', null, spec)).statusCode).toBe(401);
    const rows = (await entries()).slice(before);
    expect(rows.map((e) => [e.action, e.target, e.result.replace(/:.*/s, '')])).toEqual([
      ['machine.cordon', 'a-1', 'ok'],
      ['machine.cordon', 'a-1', 'refused'],
      ['token.create', made.info.id, 'ok'],
      ['machine.join', 'a-2', 'ok'],
      ['token.revoke', made.info.id, 'ok'],
    ]);
    expect(rows[3]!.actor).toMatch(new RegExp(`^join token ${made.info.id} \\(nodes\\)$`));
    expect((await call('GET', '/v1/audit', t.ml)).statusCode).toBe(403);
    const since = (await call('GET', `/v1/audit?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`, t.admin)).json();
    expect(since.entries).toEqual([]);
  });
});
