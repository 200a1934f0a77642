import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { runLogs } from './logs-command.js';

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
