import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventView } from '../../api/contract/job-view.js';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { runEvents } from './events-command.js';

const event = (seq: number, type: string, jobId: string | null, message: string): EventView => ({
  seq,
  at: Date.UTC(2026, 0, 1, 0, 0, seq),
  type: type as EventView['type'],
  jobId,
  stageName: null,
  attemptId: null,
  machineId: null,
  message,
  data: {},
});
const live = [
  event(1, 'stage:running', 'job_01aaaaaaaaaaaaaaaaaa', 'stage train running'),
  event(2, 'attempt:running', 'job_01bbbbbbbbbbbbbbbbbb', 'stage eval attempt 1 running on cpu-1'),
  event(3, 'machine:lost', null, 'machine gpu-2 lost'),
];

/** A fake Gantry with teams `default` and `vision`, pools `cpu` and `gpu:h100`, and an event stream that sends `live`. */
async function fakeGantry() {
  const calls: string[] = [];
  const server = createServer((req, res) => {
    calls.push(req.url ?? '');
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname === '/v1/events') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(live.map((e) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(''));
      return; // held open, as the server's is
    }
    res.setHeader('content-type', 'application/json');
    if (u.pathname === '/v1/teams') return res.end(JSON.stringify({ teams: [{ name: 'default' }, { name: 'vision' }] }));
    if (u.pathname === '/v1/pools') return res.end(JSON.stringify({ at: 0, pools: [{ pool: 'cpu' }, { pool: 'gpu:h100' }] }));
    res.statusCode = 404;
    res.end(JSON.stringify({ error: 'not_found', message: 'nope' }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise<void>((r) => server.close(() => r())));
  server.on('connection', (s) => closers.push(async () => void s.destroy()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls };
}
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

function capture(stopAfterLines = Infinity) {
  const out: string[] = [];
  const err: string[] = [];
  const stop = new AbortController();
  const io: CliIo = {
    stdout: {
      write: (s: string) => {
        out.push(s);
        if (out.length >= stopAfterLines) stop.abort();
      },
    },
    stderr: { write: (s: string) => err.push(s) },
    color: false,
    signal: stop.signal,
  };
  return { io, out, err };
}

describe('gantry events --follow', () => {
  it('over every job, names the job of each stage and attempt line ("-" for a machine event)', async () => {
    const g = await fakeGantry();
    const t = capture(live.length);
    expect(await runEvents(undefined, { server: g.url, follow: true }, t.io)).toBe(ExitCode.ok);
    expect(t.out).toEqual([
      '2026-01-01T00:00:01.000Z  stage:running          job_01aaaaaaaaaaaaaaaaaa stage train running\n',
      '2026-01-01T00:00:02.000Z  attempt:running        job_01bbbbbbbbbbbbbbbbbb stage eval attempt 1 running on cpu-1\n',
      '2026-01-01T00:00:03.000Z  machine:lost           -                        machine gpu-2 lost\n',
    ]);
  });

  it('refuses a pool the server does not know, with exit 2 and the pools it knows, without following', async () => {
    const g = await fakeGantry();
    const t = capture();
    expect(await runEvents(undefined, { server: g.url, follow: true, pool: 'gpu:a100' }, t.io)).toBe(ExitCode.usage);
    expect(t.err.join('')).toBe('gantry: no pool "gpu:a100" on this server; pools (of the machines and of the queued stages): cpu, gpu:h100\n');
    expect(g.calls.some((c) => c.startsWith('/v1/events'))).toBe(false);
  });

  it('refuses a team the server does not know, with exit 2 and the teams it knows', async () => {
    const g = await fakeGantry();
    const t = capture();
    expect(await runEvents(undefined, { server: g.url, follow: true, team: 'visoin' }, t.io)).toBe(ExitCode.usage);
    expect(t.err.join('')).toBe('gantry: no team "visoin" on this server; teams: default, vision\n');
    expect(g.calls.some((c) => c.startsWith('/v1/events'))).toBe(false);
  });

  it('follows with a known team and pool, sending both filters', async () => {
    const g = await fakeGantry();
    const t = capture(live.length);
    expect(await runEvents(undefined, { server: g.url, follow: true, team: 'vision', pool: 'gpu:h100' }, t.io)).toBe(ExitCode.ok);
    expect(t.out).toHaveLength(live.length);
    expect(g.calls).toContain('/v1/events?team=vision&pool=gpu%3Ah100');
  });
});
