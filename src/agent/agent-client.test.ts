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
