import { describe, expect, it } from 'vitest';
import type { EventView } from '../../src/api/contract/job-view.js';
import { followEvents } from '../../src/cli/client/event-stream.js';
import { api, gantry, gantryUpForSuite, until } from '../support/gantry-process.js';

/**
 * The live event stream (issue 11): GET /v1/events as server-sent events from the persisted log.
 * A client cut off mid-job and reconnecting with Last-Event-ID gets every event exactly once;
 * a team token sees its own team's jobs only; `gantry events JOB --follow` ends with the job.
 */
describe('GET /v1/events', () => {
  const up = gantryUpForSuite({ cluster: 'machines:\n  - { name: cpu-1, cpu: 4, memory: 4Gi }\n', machines: 1 });

  const submit = (spec: unknown, token?: string) =>
    api(up().url, '/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(spec),
    });
  const chain = (name: string, team?: string) => ({
    name,
    ...(team ? { team } : {}),
    stages: ['a', 'b', 'c'].map((s, i) => ({ name: s, ...(i ? { needs: [['a', 'b', 'c'][i - 1]] } : {}), command: ['sleep', '0.2'] })),
  });

  it('a client cut off and resuming with Last-Event-ID gets every event of the job once, in order', async () => {
    const got: EventView[] = [];
    const job = await submit(chain('resume-me'));
    const id = job.body.id as string;
    // First connection: a few events, then the connection is cut.
    const first = new AbortController();
    await followEvents({
      url: `${up().url}/v1/events?job=${id}`,
      headers: { authorization: `Bearer ${up().token}` },
      signal: first.signal,
      onEvent: (e) => {
        got.push(e);
        return got.length < 3;
      },
    });
    const lastSeen = got.at(-1)!.seq;
    // Time passes while disconnected: the job runs on.
    await new Promise((r) => setTimeout(r, 800));
    const second = new AbortController();
    await followEvents({
      url: `${up().url}/v1/events?job=${id}`,
      headers: { authorization: `Bearer ${up().token}` },
      lastEventId: lastSeen,
      signal: second.signal,
      onEvent: (e) => {
        got.push(e);
        return e.type !== 'job:succeeded';
      },
    });
    const log = (await api(up().url, `/v1/jobs/${id}/events`)).body.events as EventView[];
    expect(got.map((e) => e.seq)).toEqual(log.map((e) => e.seq));
    expect(got.at(-1)!.type).toBe('job:succeeded');
    expect(new Set(got.map((e) => e.type))).toEqual(new Set(log.map((e) => e.type)));
  }, 60_000);

  it("live from now: a team token sees its own team's jobs and no other team's", async () => {
    const tok = (
      await api(up().url, '/v1/tokens', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'team', team: 'ml', name: 'ml' }),
      })
    ).body.token as string;
    const seen: EventView[] = [];
    const stop = new AbortController();
    const following = followEvents({
      url: `${up().url}/v1/events`,
      headers: { authorization: `Bearer ${tok}` },
      signal: stop.signal,
      onEvent: (e) => void seen.push(e),
    });
    await new Promise((r) => setTimeout(r, 300));
    const other = await submit(chain('not-theirs', 'vision'));
    const mine = await submit(chain('theirs'), tok);
    expect(mine.status).toBe(201);
    await until(
      'their job done',
      async () => seen,
      (s) => s.some((e) => e.jobId === mine.body.id && e.type === 'job:succeeded'),
      30_000,
    );
    await until(
      'the other done',
      () => api(up().url, `/v1/jobs/${other.body.id}`),
      (r) => r.body.state === 'succeeded',
      30_000,
    );
    await new Promise((r) => setTimeout(r, 2500));
    stop.abort();
    await following;
    expect(seen.some((e) => e.jobId === other.body.id)).toBe(false);
    expect(seen.filter((e) => e.jobId === mine.body.id).length).toBeGreaterThan(5);
    // Asking for another team's events outright is refused.
    const refused = await api(up().url, '/v1/events?team=vision', { headers: { authorization: `Bearer ${tok}`, accept: 'text/event-stream' } });
    expect(refused.status).toBe(403);
  }, 60_000);

  it('gantry events JOB --follow prints the job from its submission and ends when it ends', async () => {
    const job = await submit(chain('followed'));
    const r = await gantry(['events', job.body.id, '--follow', '--server', up().url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('job:submitted');
    expect(r.stdout.trim().split('\n').at(-1)).toContain('job:succeeded');
  }, 60_000);
});
