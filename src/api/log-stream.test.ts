import type { FastifyReply } from 'fastify';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Topic } from '../domain/topic.js';
import { MemoryBus } from '../bus/memory-bus.js';
import type { LogChunk } from '../store/records.js';
import type { ApiContext } from './api-context.js';
import { streamLog } from './log-stream.js';

/**
 * The log stream reads when told (a piece of its attempt stored, other news), not on a timer: with
 * time frozen, only a wake-up on the bus can make it read; its 2 s timer is the fallback.
 */
type Attempt = { id: string; number: number; state: 'running' | 'succeeded' | 'canceled'; releasedAt: number | null };

function world() {
  const w = { stage: 'running', attempts: [] as Attempt[], chunks: [] as LogChunk[], reads: 0 };
  const store = {
    jobGet: async () => {
      w.reads += 1;
      return { stages: [{ name: 's', state: w.stage, attempts: w.attempts }] };
    },
    stageLogs: async (p: { afterId?: number; limit: number }) => w.chunks.filter((c) => c.id > (p.afterId ?? 0)).slice(0, p.limit),
  };
  return { w, store };
}

function fakeReply(lastEventId: string | null = null) {
  const sent: { id?: string; event?: string; data: unknown }[] = [];
  const sse = {
    lastEventId,
    isConnected: true,
    closed: false,
    onClose: () => {},
    sendHeaders: () => {},
    send: async (m: { id?: string; event?: string; data: unknown }) => void sent.push(m),
    close() {
      this.closed = true;
    },
  };
  // The headers are flushed at once (a quiet log still tells its client it is connected).
  const raw = { flushed: 0, flushHeaders: () => void raw.flushed++ };
  return { reply: { sse, raw } as unknown as FastifyReply, sse, sent, raw };
}

const chunk = (id: number, data: string): LogChunk => ({ id, attemptNumber: 1, stream: 'stdout', at: 0, data });
/** Lets promises and the bus's microtasks run, with time standing still. */
const settle = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

describe('streamLog', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('sends a piece as soon as its attempt says it stored one, and ends once the attempt is over and gone', async () => {
    const { w, store } = world();
    const bus = new MemoryBus();
    const { reply, sse, sent } = fakeReply();
    w.attempts.push({ id: 'a1', number: 1, state: 'running', releasedAt: null });
    const ctx = { store, bus, shutdown: new AbortController().signal } as unknown as ApiContext;
    const streaming = streamLog(ctx, reply, { jobId: 'j', stage: 's' });
    await settle();
    expect(w.reads).toBe(1);
    expect(sent).toEqual([]);

    w.chunks.push(chunk(1, 'epoch 1\n'));
    await bus.publish({ id: 'x1', topic: Topic.logsWritten, payload: { attemptId: 'a1' } });
    await settle();
    expect(sent).toEqual([{ id: '1', event: 'chunk', data: { id: 1, attemptNumber: 1, stream: 'stdout', at: 0, data: 'epoch 1\n' } }]);

    // Another attempt's log is no news to this stream.
    await bus.publish({ id: 'x2', topic: Topic.logsWritten, payload: { attemptId: 'other' } });
    await settle();
    expect(w.reads).toBe(2);

    // Canceled, its kill-grace output stored, its process gone: other news (events written) wakes it, a moment later.
    w.stage = 'canceled';
    w.attempts[0] = { ...w.attempts[0]!, state: 'canceled', releasedAt: 5 };
    w.chunks.push(chunk(4, 'cleaned up\n'));
    await bus.publish({ id: 'x3', topic: Topic.eventsWritten, payload: {} });
    await settle();
    await vi.advanceTimersByTimeAsync(100);
    await streaming;
    expect(sent.slice(1)).toEqual([
      { id: '4', event: 'chunk', data: { id: 4, attemptNumber: 1, stream: 'stdout', at: 0, data: 'cleaned up\n' } },
      { event: 'end', data: { attempt: 1, state: 'canceled' } },
    ]);
    expect(sse.closed).toBe(true);
  });

  it('resumes after Last-Event-ID, waits for a stage that has not run, and reads on every 2 s without news', async () => {
    const { w, store } = world();
    w.stage = 'pending';
    const { reply, sent } = fakeReply('1');
    const ctx = { store, bus: new MemoryBus(), shutdown: new AbortController().signal } as unknown as ApiContext;
    const streaming = streamLog(ctx, reply, { jobId: 'j', stage: 's', after: 0 });
    await settle();
    expect(w.reads).toBe(1);
    await vi.advanceTimersByTimeAsync(1999);
    expect(w.reads).toBe(1);
    // It ran and ended while no wake-up came (a bus that lost it): the timer finds out.
    w.stage = 'succeeded';
    w.attempts.push({ id: 'a1', number: 1, state: 'succeeded', releasedAt: 9 });
    w.chunks.push(chunk(1, 'seen before\n'), chunk(2, 'new\n'));
    await vi.advanceTimersByTimeAsync(1);
    await streaming;
    expect(w.reads).toBe(2);
    expect(sent.map((m) => m.id ?? m.event)).toEqual(['2', 'end']);
  });
});
