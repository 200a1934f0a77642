import { describe, expect, it } from 'vitest';
import { AgentClient, isRetryable } from './agent-client.js';

describe('AgentClient uploads', () => {
  it('fails for good, before any request, on an output file it cannot read', async () => {
    // No server at this address: if a request were made it would fail as a (retryable) network error.
    const client = new AgentClient({ serverUrl: 'http://127.0.0.1:9' });
    const err = await client.uploadFile('att_x', 1, 'gone.txt', '/nonexistent/gone.txt').catch((e: unknown) => e);
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
      const first = await client.heartbeat('m1', { running: [] } as never).catch((e: unknown) => e);
      expect(isRetryable(first)).toBe(true);
      expect(client.server).toBe(`http://127.0.0.1:${port}`);
      expect(await client.heartbeat('m1', { running: [] } as never)).toMatchObject({ health: 'ready' });
      expect(await client.heartbeat('m1', { running: [] } as never)).toMatchObject({ health: 'ready' });
      expect(hits).toEqual(['/v1/agent/machines/m1/heartbeat', '/v1/agent/machines/m1/heartbeat']);
    } finally {
      await new Promise<void>((r) => live.close(() => r()));
    }
  });
});
