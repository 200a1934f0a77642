import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { RequestAbandoned } from '../domain/errors.js';
import { requestGone } from './request-gone.js';

/** A real server and client: the signal rests on Node's events for a closed connection, which an injected request does not have. */
describe('requestGone: a request its client gave up on', () => {
  const app = Fastify();
  afterEach(() => app.close());

  it('aborts when the client closes before the answer, with RequestAbandoned; not when the answer is sent', async () => {
    const signals: AbortSignal[] = [];
    let entered!: (signal: AbortSignal) => void;
    const inHandler = new Promise<AbortSignal>((r) => (entered = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    /** The response's 'close' listeners before requestGone and after done(): what it adds it takes away. */
    const listeners: [number, number][] = [];
    app.post('/report', async (req, reply) => {
      const before = reply.raw.listenerCount('close');
      const gone = requestGone(reply, 'report');
      signals.push(gone.signal);
      if (req.headers['x-slow'] === '1') {
        entered(gone.signal);
        await released;
      }
      gone.done();
      listeners.push([before, reply.raw.listenerCount('close')]);
      return { ok: true };
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    const send = (slow: boolean) =>
      new Promise<number | Error>((resolve) => {
        const r = request(
          { host: '127.0.0.1', port, path: '/report', method: 'POST', headers: { 'x-slow': slow ? '1' : '0', 'content-type': 'application/json' } },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          },
        );
        r.on('error', resolve);
        r.end('{}');
        // The client's timeout: it gives up while the handler waits.
        if (slow) void inHandler.then(() => r.destroy());
      });

    expect(await send(false)).toBe(200);
    const given = send(true);
    const signal = await inHandler;
    expect(await given).toBeInstanceOf(Error);
    // The server sees the connection close a few turns of its loop later.
    const reason = await new Promise<unknown>((r) => (signal.aborted ? r(signal.reason) : signal.addEventListener('abort', () => r(signal.reason))));
    expect(reason).toBeInstanceOf(RequestAbandoned);
    release();
    expect(await send(false)).toBe(200);
    // The answered ones were never aborted, and none left a listener behind.
    expect(signals.map((s) => s.aborted)).toEqual([false, true, false]);
    expect(listeners.every(([before, after]) => after === before)).toBe(true);
  });
});
