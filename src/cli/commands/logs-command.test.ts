import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { rankArg, runLogs } from './logs-command.js';

// Chunks appear one per poll; the stage ends once all are out.
const chunks = [
  { id: 3, attemptNumber: 1, stream: 'stdout', at: 0, data: 'epoch 1\n' },
  { id: 5, attemptNumber: 1, stream: 'stderr', at: 0, data: 'crash\n' },
  { id: 9, attemptNumber: 2, stream: 'stdout', at: 0, data: 'epoch 1 again\n' },
];
let visible = 0;
const afters: string[] = [];
let url = '';
const server = createServer((req, res) => {
  const u = new URL(req.url ?? '/', 'http://x');
  res.setHeader('content-type', 'application/json');
  if (u.pathname === '/v1/jobs/j_1') {
    const state = visible >= chunks.length ? 'succeeded' : 'running';
    // The second attempt's process is gone (released) only once it has ended.
    const attempts = [
      { number: 1, state: 'failed', releasedAt: 1 },
      { number: 2, state: state === 'succeeded' ? 'succeeded' : 'running', releasedAt: state === 'succeeded' ? 2 : null },
    ];
    return res.end(JSON.stringify({ id: 'j_1', state, stages: [{ name: 'train', state, attempts }] }));
  }
  if (u.pathname === '/v1/jobs/j_1/stages/train/logs') {
    afters.push(u.searchParams.get('after') ?? '');
    const after = Number(u.searchParams.get('after') ?? -1);
    const out = chunks.slice(0, visible).filter((c) => c.id > after);
    visible = Math.min(visible + 1, chunks.length);
    return res.end(JSON.stringify({ chunks: out }));
  }
  res.statusCode = 404;
  res.end(JSON.stringify({ error: 'not_found', message: 'nope' }));
});

beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe('runLogs --follow', () => {
  it('prints new output as it arrives, marks a new attempt, and stops after the stage ends', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, color: false };
    expect(await runLogs('j_1', 'train', { server: url, follow: true, interval: 5 }, io)).toBe(ExitCode.ok);
    expect(out.join('')).toBe('epoch 1\ncrash\nepoch 1 again\n');
    expect(err.join('')).toBe('--- attempt 2 ---\n');
    // The cursor moves with the last chunk seen, so nothing is printed twice.
    expect(afters.filter(Boolean)).toContain('5');
    expect(afters.filter(Boolean).every((a) => ['3', '5', '9'].includes(a))).toBe(true);
  });
});

describe('runLogs --follow on the log stream', () => {
  it('prints what the stream sends, resumes a dropped stream after the last chunk, and ends at its end, without polling', async () => {
    const requests: { url: string; lastEventId: string | undefined }[] = [];
    const sse = (id: number | null, event: string, data: unknown) => `${id !== null ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    const stream = createServer((req, res) => {
      requests.push({ url: req.url ?? '', lastEventId: req.headers['last-event-id'] as string | undefined });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (requests.length === 1) {
        // The first connection is cut after one chunk, with no end.
        res.end(sse(3, 'chunk', chunks[0]));
        return;
      }
      res.end(sse(5, 'chunk', chunks[1]) + sse(9, 'chunk', chunks[2]) + sse(null, 'end', { attempt: 2, state: 'succeeded' }));
    });
    await new Promise<void>((r) => stream.listen(0, '127.0.0.1', r));
    try {
      const out: string[] = [];
      const err: string[] = [];
      const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, color: false };
      const at = `http://127.0.0.1:${(stream.address() as AddressInfo).port}`;
      expect(await runLogs('j_1', 'train', { server: at, follow: true, interval: 60_000 }, io)).toBe(ExitCode.ok);
      expect(out.join('')).toBe('epoch 1\ncrash\nepoch 1 again\n');
      expect(err.join('')).toContain('--- attempt 2 ---\n');
      expect(err.join('')).toContain('log stream dropped');
      expect(requests.map((r) => r.url)).toEqual(['/v1/jobs/j_1/stages/train/logs?follow=1', '/v1/jobs/j_1/stages/train/logs?follow=1']);
      expect(requests.map((r) => r.lastEventId)).toEqual([undefined, '3']);
    } finally {
      await new Promise<void>((r) => stream.close(() => r()));
    }
  });
});

describe('runLogs --rank', () => {
  it("asks for the member's log, and with all prints every member's lines, each prefixed with its rank once per line", async () => {
    const gang = [
      { id: 1, attemptNumber: 1, rank: 1, stream: 'stdout', at: 0, data: 'loss ' },
      { id: 2, attemptNumber: 1, rank: 0, stream: 'stdout', at: 0, data: 'step 1\nstep 2\n' },
      { id: 3, attemptNumber: 1, rank: 1, stream: 'stdout', at: 0, data: '0.5\n' },
    ];
    const urls: string[] = [];
    const stream = createServer((req, res) => {
      urls.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const sse = (id: number | null, event: string, data: unknown) => `${id !== null ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
      res.end(gang.map((c) => sse(c.id, 'chunk', c)).join('') + sse(null, 'end', { attempt: 1, state: 'succeeded' }));
    });
    await new Promise<void>((r) => stream.listen(0, '127.0.0.1', r));
    try {
      const out: string[] = [];
      const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: () => true }, color: false };
      const at = `http://127.0.0.1:${(stream.address() as AddressInfo).port}`;
      expect(await runLogs('j_1', 'train', { server: at, follow: true, rank: 'all' }, io)).toBe(ExitCode.ok);
      expect(out.join('')).toBe('[rank 1] loss [rank 0] step 1\n[rank 0] step 2\n0.5\n');
      expect(urls).toEqual(['/v1/jobs/j_1/stages/train/logs?rank=all&follow=1']);
      out.length = 0;
      expect(await runLogs('j_1', 'train', { server: at, follow: true, rank: 2 }, io)).toBe(ExitCode.ok);
      expect(urls[1]).toBe('/v1/jobs/j_1/stages/train/logs?rank=2&follow=1');
    } finally {
      await new Promise<void>((r) => stream.close(() => r()));
    }
  });

  it('takes a rank or all, and refuses anything else naming what it wants', () => {
    expect(rankArg('0')).toBe(0);
    expect(rankArg('3')).toBe(3);
    expect(rankArg('all')).toBe('all');
    for (const bad of ['-1', 'two', '1.5', '']) expect(() => rankArg(bad)).toThrow("must be a gang member's rank (0, 1, ...) or all");
  });
});
