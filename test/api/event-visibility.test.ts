import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventView } from '../../src/api/contract/job-view.js';
import { followEvents } from '../../src/cli/client/event-stream.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { bearer, makeToken } from '../support/tokens.js';

/**
 * `GET /v1/events` sends a token only what the API shows it elsewhere (issue 28): token events
 * (`GET /v1/tokens` is admin only) and the leadership go to admins, another team's jobs' events
 * to nobody of this team; machines' and teams' changes to every person's token.
 */
describe('events filtered by what the token may see', () => {
  let cp: ControlPlane;
  let dir: string;
  let admin: Record<string, string>;
  let alpha: Record<string, string>;
  let marker: string;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-event-visibility-'));
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, port: 0 }));
    await cp.start();
    admin = bearer(await makeToken(cp.store, 'admin'));
    alpha = bearer(await makeToken(cp.store, 'team', { team: 'alpha' }));
    const call = (method: 'POST' | 'DELETE', url: string, headers: Record<string, string>, body?: unknown) =>
      cp.app.inject({
        method,
        url,
        headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { payload: JSON.stringify(body) } : {}),
      });
    const spec = (name: string, team?: string) => ({ name, ...(team ? { team } : {}), stages: [{ name: 'a', command: ['true'] }] });
    // Everything below is written before anyone follows: each stream reads the log from its start.
    const made = await call('POST', '/v1/tokens', admin, { kind: 'team', team: 'beta', name: 'beta CI' });
    expect(made.statusCode).toBe(201);
    ids.token = made.json().info.id;
    expect((await call('DELETE', `/v1/tokens/${ids.token}`, admin)).statusCode).toBe(200);
    expect((await call('POST', '/v1/teams', admin, { name: 'gamma' })).statusCode).toBe(201);
    ids.beta = (await call('POST', '/v1/jobs', admin, spec('betas', 'beta'))).json().id;
    ids.alpha = (await call('POST', '/v1/jobs', alpha, spec('alphas'))).json().id;
    // The last event written: where a stream that got it has read everything before it.
    marker = (await call('POST', '/v1/jobs', admin, spec('marker', 'alpha'))).json().id;
  });
  afterAll(async () => {
    await cp?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Every event the token is sent, from the log's start to the marker job's first event. */
  async function streamed(headers: Record<string, string>): Promise<EventView[]> {
    const seen: EventView[] = [];
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), 20_000);
    try {
      await followEvents({
        url: `${cp.url}/v1/events?after=0`,
        headers,
        signal: stop.signal,
        onEvent: (e) => {
          seen.push(e);
          return e.jobId !== marker;
        },
      });
    } finally {
      clearTimeout(timer);
    }
    expect(seen.at(-1)?.jobId, 'the stream ended before the marker job').toBe(marker);
    return seen;
  }

  it("a team token's stream has no token, leadership or other team's events; its own jobs' and teams' changes it has", async () => {
    const seen = await streamed(alpha);
    const types = new Set(seen.map((e) => e.type));
    expect([...types].filter((t) => t.startsWith('token:') || t.startsWith('leader:'))).toEqual([]);
    expect(seen.filter((e) => `${e.message} ${JSON.stringify(e.data)}`.includes(ids.token!) || e.message.includes('beta CI'))).toEqual([]);
    expect(seen.filter((e) => e.jobId === ids.beta)).toEqual([]);
    expect(seen.some((e) => e.jobId === ids.alpha && e.type === 'job:submitted')).toBe(true);
    expect(seen.some((e) => e.type === 'team:created' && e.message.includes('gamma'))).toBe(true);
  });

  it("an admin token gets them all: the tokens made and revoked, every team's jobs", async () => {
    const seen = await streamed(admin);
    expect(seen.filter((e) => e.type === 'token:created' && e.message.includes(ids.token!))).toHaveLength(1);
    expect(seen.filter((e) => e.type === 'token:revoked' && e.message.includes(ids.token!))).toHaveLength(1);
    // The facts of the message, as fields for scripts.
    expect(seen.find((e) => e.type === 'token:revoked')!.data).toEqual({ tokenId: ids.token, kind: 'team', team: 'beta' });
    expect(seen.some((e) => e.jobId === ids.beta)).toBe(true);
    expect(seen.some((e) => e.jobId === ids.alpha)).toBe(true);
  });

  it("a job's list of events is the same filter's: its team sees them, another team gets 404", async () => {
    const own = await cp.app.inject({ method: 'GET', url: `/v1/jobs/${ids.alpha}/events`, headers: alpha });
    expect(own.statusCode).toBe(200);
    const events = own.json<{ events: EventView[] }>().events;
    expect(events.map((e) => e.type)).toContain('job:submitted');
    expect(events.find((e) => e.type === 'job:submitted')!.data).toMatchObject({ stages: 1 });
    expect(events.every((e) => typeof e.data === 'object' && e.data !== null)).toBe(true);
    expect((await cp.app.inject({ method: 'GET', url: `/v1/jobs/${ids.beta}/events`, headers: alpha })).statusCode).toBe(404);
  });
});
