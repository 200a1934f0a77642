import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { runAudit } from '../../src/cli/commands/audit-command.js';
import { bearer, makeToken } from '../support/tokens.js';
import { logLines } from '../support/log-lines.js';

/**
 * Issue 28: 600 × 403 in half a second were all answered and wrote 606 audit rows; 401s were not
 * logged. Now refusals count toward the caller's rate limit (by token, else by address), the same
 * refusal within a minute is one audit row with a count, and every 401 is a line in the log.
 */
describe('refused requests: rate-limited, folded in the audit, 401s logged', () => {
  let cp: ControlPlane;
  let dir: string;
  let now = 1_800_000_000_000;
  const { logger, lines } = logLines();
  const t = { admin: '', ml: '', revoked: '' };
  const post = (url: string, token: string | null, body: unknown = {}, ip = '127.0.0.1') =>
    cp.app.inject({
      method: 'POST',
      url,
      remoteAddress: ip,
      headers: { ...(token ? bearer(token) : {}), 'content-type': 'application/json' },
      payload: JSON.stringify(body),
    });
  const audit = async () =>
    (await cp.app.inject({ method: 'GET', url: '/v1/audit', headers: bearer(t.admin) })).json().entries as {
      seq: number;
      action: string;
      target: string | null;
      result: string;
      count: number;
      at: string;
      lastAt: string;
      tokenId: string | null;
    }[];
  const statuses = (rs: { statusCode: number }[]) => {
    const n: Record<number, number> = {};
    for (const r of rs) n[r.statusCode] = (n[r.statusCode] ?? 0) + 1;
    return n;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-refusals-'));
    // Time stands still unless the test moves it: no bucket refills behind its back. 50 a second, 250 at once.
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, rateLimitPerSecond: 50 }), {
      clock: { now: () => now },
      logger,
    });
    t.admin = await makeToken(cp.store, 'admin', { now });
    t.ml = await makeToken(cp.store, 'team', { team: 'ml', now });
    t.revoked = await makeToken(cp.store, 'team', { team: 'ml', name: 'old', now });
    const old = (await cp.store.tokenList({})).find((x) => x.name === 'old')!;
    await cp.store.tokenRevoke({ id: old.id, now });
  });
  afterAll(async () => {
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('600 × 403 from one token: 403 up to its burst, then 429; the audit has two rows with their counts, not 600', async () => {
    const before = (await audit()).length;
    const rs = [];
    for (let i = 0; i < 600; i++) rs.push(await post('/v1/machines/gpu-1/cordon', t.ml));
    expect(statuses(rs)).toEqual({ 403: 250, 429: 350 });
    expect(rs.at(-1)!.json()).toMatchObject({
      error: 'rate_limited',
      message: expect.stringMatching(/^too many requests with token tok_\w+: try again in 1 s$/),
    });
    expect(rs.at(-1)!.headers['retry-after']).toBe('1');
    // A refusal's row is written after its answer has gone (onResponse): waited for.
    await expect
      .poll(async () => (await audit()).slice(before).map((r) => [r.action, r.target, r.result.slice(0, 13), r.count]))
      .toEqual([
        ['machine.cordon', 'gpu-1', 'refused: 403 ', 250],
        ['machine.cordon', 'gpu-1', 'refused: 429 ', 350],
      ]);
    // The token's other requests wait as well: its bucket is empty.
    expect((await cp.app.inject({ method: 'GET', url: '/v1/jobs', headers: bearer(t.ml) })).statusCode).toBe(429);
    now += 2000;
    expect((await cp.app.inject({ method: 'GET', url: '/v1/jobs', headers: bearer(t.ml) })).statusCode).toBe(200);
  });

  it('the same refusal a minute later is a row of its own; `gantry audit` shows the count', async () => {
    now += 120_000;
    const before = (await audit()).length;
    for (let i = 0; i < 3; i++) await post('/v1/machines/gpu-1/cordon', t.ml);
    now += 61_000;
    await post('/v1/machines/gpu-1/cordon', t.ml);
    await expect
      .poll(async () => (await audit()).slice(before).map((r) => [r.result.slice(0, 12), r.count]))
      .toEqual([
        ['refused: 403', 3],
        ['refused: 403', 1],
      ]);
    const rows = (await audit()).slice(before);
    expect(Date.parse(rows[0]!.lastAt) - Date.parse(rows[0]!.at)).toBe(0);
    const url = await cp.app.listen({ host: '127.0.0.1', port: 0 });
    const out: string[] = [];
    const io = { stdout: { write: (x: string) => out.push(x) }, stderr: { write: (x: string) => out.push(x) }, color: false };
    expect(await runAudit({ server: url, token: t.admin }, io)).toBe(0);
    const printed = out.join('').split('\n');
    const folded = printed.filter((l) => l.includes('machine.cordon') && l.includes('refused: 403'));
    expect(folded[0]).toMatch(/ refused: 403 forbidden: this needs an admin token; .* \(250 times, last \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)  by team ml token /);
    expect(folded.at(-1)).not.toMatch(/times, last/);
  });

  it('401s: each is a line in the log (address, route, why), counted against the address (no token) or the token (revoked), 429 past it', async () => {
    now += 120_000;
    lines.length = 0;
    const anonymous = [];
    for (let i = 0; i < 300; i++) anonymous.push(await post('/v1/jobs', null, {}, '10.0.0.7'));
    expect(statuses(anonymous)).toEqual({ 401: 250, 429: 50 });
    expect(anonymous.at(-1)!.json().message).toBe('too many requests from 10.0.0.7: try again in 1 s');
    const logged = lines.filter((l) => l.msg.startsWith('request refused (401)'));
    expect(logged).toHaveLength(250);
    expect(logged[0]).toMatchObject({ level: 40, ip: '10.0.0.7', route: '/v1/jobs', tokenId: null });
    expect(logged[0]!.msg).toMatch(/^request refused \(401\): this request needs a token/);
    // Another address, and a valid token from the same one, are not held back by it.
    expect((await post('/v1/jobs', null, {}, '10.0.0.8')).statusCode).toBe(401);
    expect((await cp.app.inject({ method: 'GET', url: '/v1/jobs', remoteAddress: '10.0.0.7', headers: bearer(t.admin) })).statusCode).toBe(200);
    // A revoked token's 401s count against that token, wherever they come from.
    const revoked = [];
    for (let i = 0; i < 260; i++) revoked.push(await post('/v1/jobs', t.revoked, {}, `10.0.1.${i % 200}`));
    expect(statuses(revoked)).toEqual({ 401: 250, 429: 10 });
    const revokedLine = lines.find((l) => /was revoked/.test(l.msg))!;
    expect(revokedLine.tokenId).toMatch(/^tok_/);
    // Nobody to name: no audit row for a 401.
    expect((await audit()).filter((r) => r.tokenId === null)).toEqual([]);
  });

  it("audit rows past GANTRY_AUDIT_RETENTION_DAYS (90 by default) are deleted by the leader's pruning loop, on the server's clock", async () => {
    const rows = await audit();
    expect(rows.length).toBeGreaterThan(0);
    const oldest = Math.min(...rows.map((r) => Date.parse(r.at)));
    const newest = Math.max(...rows.map((r) => Date.parse(r.at)));
    // One more, a day after the newest: it outlives the others by a day.
    now = newest + 86_400_000;
    await post('/v1/machines/gpu-2/cordon', t.ml);
    await expect.poll(async () => (await audit()).length).toBe(rows.length + 1);
    // 90 days after the oldest began: kept, to the millisecond.
    now = oldest + 90 * 86_400_000;
    await cp.loops.reconciler.pruning.runOnce();
    expect((await audit()).length).toBe(rows.length + 1);
    now = newest + 90 * 86_400_000 + 1;
    await cp.loops.reconciler.pruning.runOnce();
    expect((await audit()).map((r) => r.target)).toEqual(['gpu-2']);
    now += 86_400_000;
    await cp.loops.reconciler.pruning.runOnce();
    expect(await audit()).toEqual([]);
  });
});
