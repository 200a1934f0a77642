import { describe, expect, it } from 'vitest';
import { followEventStream, type StreamStatus } from './event-stream';

const frame = (seq: number) =>
  `id: ${seq}\nevent: stage:running\ndata: ${JSON.stringify({ seq, at: seq, type: 'stage:running', jobId: 'j', stageName: 's', attemptId: null, machineId: null, message: '' })}\n\n`;

/** A response whose body is these pieces of text, then its end. */
function sse(...pieces: string[]): Response {
  const enc = new TextEncoder();
  return new Response(
    new ReadableStream({
      start(c) {
        for (const p of pieces) c.enqueue(enc.encode(p));
        c.close();
      },
    }),
    { status: 200, headers: { 'content-type': 'text/event-stream' } },
  );
}

describe('followEventStream', () => {
  it('reopens a dropped stream with Last-Event-ID, tells each event once, and stops when the token is refused', async () => {
    const asked: (string | null)[] = [];
    const answers = [
      // An event split across two reads, and a keep-alive comment.
      () => sse(frame(1), ': keep-alive\n\n', frame(2).slice(0, 20), frame(2).slice(20)),
      () => Promise.reject(new TypeError('Failed to fetch')),
      // The server replays from what it was told; one it sent before is not told again.
      () => sse(frame(2), frame(3)),
      () => new Response(JSON.stringify({ error: 'unauthenticated', message: 'token tok_1 (ci) was revoked' }), { status: 401 }),
    ];
    const fetch = (async (_url: string, init: RequestInit) => {
      asked.push(new Headers(init.headers).get('last-event-id'));
      return answers[asked.length - 1]!();
    }) as unknown as typeof globalThis.fetch;
    const seen: number[] = [];
    const statuses: StreamStatus[] = [];
    const delays: number[] = [];
    await followEventStream({
      token: 't',
      fetch,
      signal: new AbortController().signal,
      onEvent: (e) => seen.push(e.seq),
      onStatus: (s) => statuses.push(s),
      sleep: async (ms) => void delays.push(ms),
      random: () => 0.5,
      now: () => 0,
    });
    expect(seen).toEqual([1, 2, 3]);
    expect(asked).toEqual([null, '2', '2', '3']);
    expect(statuses.map((s) => s.state)).toEqual(['connecting', 'live', 'reconnecting', 'reconnecting', 'live', 'reconnecting', 'refused']);
    expect(statuses[3]).toMatchObject({ why: 'cannot reach the server', failures: 2 });
    expect(statuses.at(-1)).toEqual({ state: 'refused', status: 401, why: 'token tok_1 (ci) was revoked' });
    // Backoff doubles from 1 s, and starts over after a connection that opened.
    expect(delays).toEqual([1000, 2000, 1000]);
  });
});
