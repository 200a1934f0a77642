import { describe, expect, it } from 'vitest';
import { AgentClient, AgentHttpError, isNetworkFailure, isRetryable, TransferError } from './agent-client.js';

describe('AgentClient uploads', () => {
  it('fails for good, before any request, on an output file it cannot read', async () => {
    // No server at this address: if a request were made it would fail as a (retryable) network error.
    const client = new AgentClient({ serverUrl: 'http://127.0.0.1:9' });
    const err = await client.uploadFile('att_x', 1, '/nonexistent', 'gone.txt').catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/cannot read output gone.txt/);
    expect(isRetryable(err)).toBe(false);
  });
});

describe('AgentClient with several servers', () => {
  it('moves to the next server listed when one cannot be reached, and stays there', async () => {
    const { createServer } = await import('node:http');
    const hits: string[] = [];
    const live = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ health: 'ready', kill: [], assignments: [] }));
    });
    await new Promise<void>((r) => live.listen(0, '127.0.0.1', r));
    const port = (live.address() as { port: number }).port;
    try {
      // Port 9 (discard) is closed here: connection refused.
      const client = new AgentClient({ serverUrl: `http://127.0.0.1:9, http://127.0.0.1:${port}/` });
      expect(client.server).toBe('http://127.0.0.1:9');
      const first = await client.heartbeat('m1', { running: [] }).catch((e: unknown) => e);
      expect(isRetryable(first)).toBe(true);
      expect(client.server).toBe(`http://127.0.0.1:${port}`);
      expect(await client.heartbeat('m1', { running: [] })).toMatchObject({ health: 'ready' });
      expect(await client.heartbeat('m1', { running: [] })).toMatchObject({ health: 'ready' });
      expect(hits).toEqual(['/v1/agent/machines/m1/heartbeat', '/v1/agent/machines/m1/heartbeat']);
    } finally {
      await new Promise<void>((r) => live.close(() => r()));
    }
  });
});

describe('AgentClient: what is worth another try', () => {
  const coded = (code: string, message = code) => Object.assign(new Error(message), { code });

  it("knows a network failure by the socket's code, not by the error's class", () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH']) {
      expect(isNetworkFailure(coded(code)), code).toBe(true);
      expect(isRetryable(coded(code)), code).toBe(true);
    }
    // A bug or a bad setting: a retry would only repeat it, forever.
    expect(isRetryable(new TypeError("Cannot read properties of undefined (reading 'id')"))).toBe(false);
    expect(isRetryable(new TypeError('fetch failed'))).toBe(false);
    expect(isRetryable(Object.assign(new TypeError('Invalid URL'), { code: 'ERR_INVALID_URL' }))).toBe(false);
    expect(isRetryable(coded('ERR_INVALID_CHAR'))).toBe(false);
    expect(isRetryable(coded('EACCES'))).toBe(false);
    expect(isRetryable(undefined)).toBe(false);
  });

  it('retries timeouts, broken transfers and 5xx/429; not 4xx nor an abort', () => {
    expect(isRetryable(new DOMException('no answer', 'TimeoutError'))).toBe(true);
    expect(isRetryable(new TransferError('short'))).toBe(true);
    expect(isRetryable(new AgentHttpError(503, 'unavailable', ''))).toBe(true);
    expect(isRetryable(new AgentHttpError(429, 'rate_limited', ''))).toBe(true);
    expect(isRetryable(new AgentHttpError(400, 'validation', ''))).toBe(false);
    expect(isRetryable(new DOMException('stop', 'AbortError'))).toBe(false);
  });

  it('a server that hangs up is a network failure (socket hang up: ECONNRESET)', async () => {
    const { createServer } = await import('node:http');
    const rude = createServer((req) => req.socket.destroy());
    await new Promise<void>((r) => rude.listen(0, '127.0.0.1', r));
    try {
      const client = new AgentClient({ serverUrl: `http://127.0.0.1:${(rude.address() as { port: number }).port}` });
      const err = await client.heartbeat('m1', { running: [] }).catch((e: unknown) => e);
      expect((err as { code?: string }).code).toBe('ECONNRESET');
      expect(isRetryable(err)).toBe(true);
    } finally {
      await new Promise<void>((r) => rude.close(() => r()));
    }
  });

  it('a programming error in a retried call surfaces at once instead of being retried', async () => {
    const { createServer } = await import('node:http');
    let hits = 0;
    const live = createServer((_req, res) => {
      hits++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
    await new Promise<void>((r) => live.listen(0, '127.0.0.1', r));
    try {
      // A minute between tries: a retry would not end before the race below does.
      const client = new AgentClient({
        serverUrl: `http://127.0.0.1:${(live.address() as { port: number }).port}`,
        retry: { tries: 5, baseMs: 60_000, maxMs: 60_000 },
      });
      // A token with a newline: node:http refuses the header with a TypeError before sending anything.
      client.setToken('bad\ntoken');
      const late = new Promise((r) => setTimeout(() => r('still retrying'), 2000).unref());
      const err = await Promise.race([client.drainSelf('m1', false).catch((e: unknown) => e), late]);
      expect(err).toBeInstanceOf(TypeError);
      expect(isRetryable(err)).toBe(false);
      expect(hits).toBe(0);
    } finally {
      await new Promise<void>((r) => live.close(() => r()));
    }
  });

  it('a network failure in a retried call is thrown once its tries are spent', async () => {
    // Port 9 (discard) is closed here: connection refused, each try.
    const client = new AgentClient({ serverUrl: 'http://127.0.0.1:9', retry: { tries: 3, baseMs: 1, maxMs: 2 } });
    const err = await client.drainSelf('m1', false).catch((e: unknown) => e);
    expect((err as { code?: string }).code).toBe('ECONNREFUSED');
  });

  it('stopping cuts the wait between tries short, and the call ends with the reason', async () => {
    const stop = new AbortController();
    const client = new AgentClient({ serverUrl: 'http://127.0.0.1:9', retry: { tries: 5, baseMs: 60_000, maxMs: 60_000 }, signal: stop.signal });
    const call = client.drainSelf('m1', false).catch((e: unknown) => e);
    setTimeout(() => stop.abort(new Error('agent stopping')), 200).unref();
    expect(await call).toMatchObject({ message: 'agent stopping' });
  });
});
