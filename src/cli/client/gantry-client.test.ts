import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, ConnectionError, GantryClient } from './gantry-client.js';

type Handler = (req: IncomingMessage, body: string, res: ServerResponse) => void;

async function fakeServer(handler: Handler): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => handler(req, body, res));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

describe('GantryClient', () => {
  const seen: { method?: string; url?: string; body: string }[] = [];
  let server: Awaited<ReturnType<typeof fakeServer>>;

  beforeAll(async () => {
    server = await fakeServer((req, body, res) => {
      seen.push({ method: req.method, url: req.url, body });
      if (req.url === '/v1/jobs' && req.method === 'POST') {
        return send(res, 400, {
          error: 'invalid_request',
          message: '/stages/0/resources/memory: bad; /name: required',
          issues: [
            { path: '/stages/0/resources/memory', message: '"lots" is not a memory quantity' },
            { path: '/name', message: 'is required' },
          ],
        });
      }
      if (req.url?.startsWith('/v1/jobs/nope')) return send(res, 404, { error: 'not_found', message: 'job nope not found' });
      if (req.url?.startsWith('/v1/jobs/j%2F1/stages/train/logs')) return res.writeHead(200, { 'content-type': 'text/plain' }).end('hello\n');
      if (req.url === '/boom') return res.writeHead(502).end('<html>bad gateway</html>');
      return send(res, 200, { jobs: [] });
    });
  });
  afterAll(() => server.close());

  it('turns a 400 into an ApiError carrying every issue', async () => {
    const err = await new GantryClient(server.url).submit({ stages: [] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    const api = err as ApiError;
    expect(api.status).toBe(400);
    expect(api.body.issues).toEqual([
      { path: '/stages/0/resources/memory', message: '"lots" is not a memory quantity' },
      { path: '/name', message: 'is required' },
    ]);
    expect(seen.at(-1)?.body).toBe('{"stages":[]}');
  });

  it('turns a 404 into an ApiError with the server message', async () => {
    const err = await new GantryClient(server.url).getJob('nope').catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 404, message: 'job nope not found' });
  });

  it('encodes path segments and query parameters', async () => {
    const client = new GantryClient(`${server.url}/`);
    expect(await client.logs('j/1', 'train', { attempt: 2 })).toBe('hello\n');
    expect(seen.at(-1)?.url).toBe('/v1/jobs/j%2F1/stages/train/logs?attempt=2');
    await client.listJobs({ state: 'running', limit: 5 });
    expect(seen.at(-1)?.url).toBe('/v1/jobs?state=running&limit=5');
  });

  it('reports a closed port as a ConnectionError that says how to start the server', async () => {
    const closed = await fakeServer(() => {});
    await closed.close();
    const err = await new GantryClient(closed.url).health().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectionError);
    expect((err as Error).message).toMatch(new RegExp(`^cannot reach Gantry at ${closed.url}: .*ECONNREFUSED.*; is it running\\? \\(gantry up\\)$`));
  });
});

describe('GantryClient submit', () => {
  it('sends an Idempotency-Key and retries with the same one when the answer is lost', async () => {
    const keys: (string | undefined)[] = [];
    const s = await fakeServer((req, _body, res) => {
      keys.push(req.headers['idempotency-key'] as string | undefined);
      // The first answer dies with the connection (the server was killed after its commit).
      if (keys.length === 1) return void res.socket?.destroy();
      send(res, keys.length === 2 ? 200 : 201, { id: 'job_1', name: 'x' });
    });
    try {
      const job = await new GantryClient(s.url).submit({ name: 'x' });
      expect(job.id).toBe('job_1');
      expect(keys).toHaveLength(2);
      expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
      expect(keys[1]).toBe(keys[0]);
    } finally {
      await s.close();
    }
  });

  it('does not retry a refusal', async () => {
    let calls = 0;
    const s = await fakeServer((_req, _body, res) => {
      calls++;
      send(res, 409, { error: 'conflict', message: 'used for a different request' });
    });
    try {
      await expect(new GantryClient(s.url).submit({ name: 'x' })).rejects.toBeInstanceOf(ApiError);
      expect(calls).toBe(1);
    } finally {
      await s.close();
    }
  });
});

describe('GantryClient with several servers', () => {
  it('sends to the next one listed when the first cannot be reached, and names them all when none can', async () => {
    const live = await fakeServer((req, _body, res) => send(res, 200, { id: 'job_1', name: 'x', state: 'queued', stages: [] }));
    try {
      const client = new GantryClient(`http://127.0.0.1:9,${live.url}`);
      expect((await client.getJob('job_1')).id).toBe('job_1');
      expect(client.baseUrl).toBe(live.url);
      const none = new GantryClient('http://127.0.0.1:9, http://127.0.0.1:7');
      const err = await none.getJob('job_1').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectionError);
      expect((err as Error).message).toMatch(/127\.0\.0\.1:9.*127\.0\.0\.1:7/);
    } finally {
      await live.close();
    }
  });
});
