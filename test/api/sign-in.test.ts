import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from '../support/tokens.js';

/**
 * Issue 28: `gantry up` printed a never-expiring admin token in its sign-in link. Now the link
 * carries a one-time code: exchanged once, within 15 minutes, for a session that expires; the code
 * itself opens nothing else.
 */
describe('sign-in codes: single use, short-lived, single-purpose', () => {
  let cp: ControlPlane;
  let dir: string;
  let now = 1_800_000_000_000;
  let admin = '';
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-sign-in-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }), { clock: { now: () => now } });
    admin = await makeToken(cp.store, 'admin', { now });
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const exchange = (code: string) =>
    cp.app.inject({ method: 'POST', url: '/v1/sign-in', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ code }) });
  const get = (url: string, token: string) => cp.app.inject({ method: 'GET', url, headers: bearer(token) });

  it('a code is exchanged once for an admin session that expires in 12 hours; the second exchange is refused', async () => {
    const code = cp.signInCodes.issue();
    expect(code).toMatch(/^gantry_signin_[\w-]{43}$/);
    const r = await exchange(code);
    expect(r.statusCode).toBe(201);
    expect(r.headers['cache-control']).toBe('no-store');
    const s = r.json<{ token: string; expiresAt: string; who: { kind: string; name: string; tokenId: string } }>();
    expect(s.token).toMatch(/^gantry_admin_/);
    expect(Date.parse(s.expiresAt)).toBe(now + 12 * 3_600_000);
    expect(s.who).toMatchObject({ kind: 'admin', team: null, name: 'dashboard session (sign-in link)' });
    expect((await get('/v1/whoami', s.token)).json()).toEqual(s.who);
    const again = await exchange(code);
    expect(again.statusCode).toBe(401);
    expect(again.json()).toEqual({
      error: 'unauthenticated',
      message:
        'this sign-in code is not valid: a code signs in once, within 15 minutes of the start that printed it; sign in with a token, or start gantry up again for a new link',
    });
    // The exchange is audited, the refusal not (nobody to name: it is logged).
    const rows = (await get('/v1/audit', admin)).json<{ entries: { action: string; tokenId: string | null; actor: string; result: string }[] }>().entries;
    expect(rows.filter((e) => e.action === 'dashboard.sign-in').map((e) => [e.tokenId, e.actor, e.result])).toEqual([
      [null, 'a sign-in code (from 127.0.0.1)', 'ok: admin token'],
    ]);
    // The session ends: 12 hours on, its token is refused.
    now += 12 * 3_600_000;
    expect((await get('/v1/whoami', s.token)).statusCode).toBe(401);
  });

  it('a code expires after 15 minutes, unused', async () => {
    const code = cp.signInCodes.issue();
    now += 15 * 60_000 - 1;
    const late = cp.signInCodes.issue();
    now += 1;
    expect((await exchange(code)).statusCode).toBe(401);
    expect((await exchange(late)).statusCode).toBe(201);
    expect((await exchange('gantry_signin_made-up')).statusCode).toBe(401);
  });

  it('a code does nothing else on the API: not a bearer token anywhere', async () => {
    const code = cp.signInCodes.issue();
    for (const url of ['/v1/whoami', '/v1/jobs', '/v1/audit', '/v1/tokens', '/v1/events']) {
      const r = await get(url, code);
      expect([url, r.statusCode, r.json().message]).toEqual([url, 401, 'the token is not known to this server']);
    }
    // And it is still good for what it is for.
    expect((await exchange(code)).statusCode).toBe(201);
  });

  it('a bad body is a 400 naming the field', async () => {
    const r = await cp.app.inject({ method: 'POST', url: '/v1/sign-in', headers: { 'content-type': 'application/json' }, payload: '{"token":"x"}' });
    expect(r.statusCode).toBe(400);
    expect(r.json().message).toMatch(/body.*code/);
  });
});
