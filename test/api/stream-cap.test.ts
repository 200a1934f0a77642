import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from '../support/tokens.js';

/** Issue 28: one token held 2,000 event streams open; now a few, and the next is refused (429 too_many_streams) until one closes. */
describe('open streams per token', () => {
  let cp: ControlPlane;
  let dir: string;
  let url: string;
  const t = { ml: '', other: '' };
  const open: AbortController[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-streams-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0, streamsPerToken: 3 }));
    url = await cp.app.listen({ host: '127.0.0.1', port: 0 });
    t.ml = await makeToken(cp.store, 'team', { team: 'ml' });
    t.other = await makeToken(cp.store, 'team', { team: 'ml' });
  });
  afterAll(async () => {
    for (const c of open) c.abort();
    await cp.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Opens a stream and returns its status once its headers came (the body is left open). */
  const stream = async (path: string, token: string) => {
    const c = new AbortController();
    open.push(c);
    const r = await fetch(`${url}${path}`, { headers: { ...bearer(token), accept: 'text/event-stream' }, signal: c.signal });
    if (r.status !== 200) await r.text();
    return { status: r.status, close: () => c.abort(), body: r.status === 200 ? null : r };
  };

  it('the streams past the cap answer 429 too_many_streams; another token is not affected; a closed stream frees its slot', async () => {
    const held = [await stream('/v1/events', t.ml), await stream('/v1/events', t.ml), await stream('/v1/events', t.ml)];
    expect(held.map((s) => s.status)).toEqual([200, 200, 200]);
    const c = new AbortController();
    const refused = await fetch(`${url}/v1/events`, { headers: { ...bearer(t.ml), accept: 'text/event-stream' }, signal: c.signal });
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as { error: string; message: string };
    expect(body.error).toBe('too_many_streams');
    expect(body.message).toMatch(/has 3 streams open, the most this server allows a token \(GANTRY_STREAMS_PER_TOKEN=3\): close one/);
    // A followed log is a stream too: it takes a slot of the same token's.
    const job = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...bearer(t.ml), 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'j', stages: [{ name: 'a', command: ['true'] }] }),
    });
    const logUrl = `/v1/jobs/${job.json<{ id: string }>().id}/stages/a/logs?follow=1`;
    const log = await fetch(`${url}${logUrl}`, { headers: bearer(t.ml) });
    expect(log.status).toBe(429);
    expect(((await log.json()) as { error: string }).error).toBe('too_many_streams');
    expect((await stream('/v1/events', t.other)).status).toBe(200);
    held[0]!.close();
    // The slot comes back once the server has seen the connection close.
    let again = 0;
    for (let i = 0; i < 50 && again !== 200; i++) {
      again = (await stream('/v1/events', t.ml)).status;
      if (again !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    expect(again).toBe(200);
    expect((await stream('/v1/events', t.ml)).status).toBe(429);
    expect((await fetch(`${url}${logUrl}`, { headers: bearer(t.ml) })).status).toBe(429);
  });

  it('a followed log of a stage not yet started answers its headers at once, not with its first chunk', async () => {
    const job = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { ...bearer(t.other), 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'quiet', stages: [{ name: 'a', command: ['true'] }] }),
    });
    const c = new AbortController();
    open.push(c);
    const started = Date.now();
    // No machine serves the job: the log has no chunk to send, ever, in this test.
    const r = await fetch(`${url}/v1/jobs/${job.json<{ id: string }>().id}/stages/a/logs?follow=1`, {
      headers: { ...bearer(t.other), accept: 'text/event-stream' },
      signal: c.signal,
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/text\/event-stream/);
    // Before the fix the headers waited for the first keep-alive (about 15 s).
    expect(Date.now() - started).toBeLessThan(5_000);
    c.abort();
  });
});
