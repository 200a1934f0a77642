import http from 'node:http';
import https from 'node:https';
import { createParser } from 'eventsource-parser';
import { ApiError, errorBodyOf } from './api-error.js';
import { ConnectionError } from './connection-error.js';
import { errorText } from '../../lib/error-text.js';
import { sleep } from '../../lib/sleep.js';

/** One server-sent message: its `id` (when it has one), `event` (its kind) and `data` (text). */
export interface SseMessage {
  id: string | undefined;
  event: string | undefined;
  data: string;
}

export interface SseOptions {
  url: string;
  headers: Record<string, string>;
  ca?: string;
  /** Resume after this id (what a previous stream got last), sent as Last-Event-ID. */
  lastEventId?: string;
  signal: AbortSignal;
  /** Told of each message in order. Returning false ends the stream. */
  onMessage: (m: SseMessage) => boolean | void;
  /** A dropped connection is opened again after this long, resuming after the last id got. */
  retryMs?: number;
  /** Told when a connection drops (and is tried again). */
  onDrop?: (why: string) => void;
  /** Give up with a ConnectionError once no connection has been made for this long (default: never). */
  giveUpAfterMs?: number;
}

/**
 * `stopped`: `onMessage` said so, or `signal` aborted. `not-a-stream`: the server answered, but
 * not with server-sent events (a server without this stream: the caller falls back to reading).
 */
export type SseOutcome = 'stopped' | 'not-a-stream';

/**
 * Follows a server-sent event stream until `signal` aborts or `onMessage` returns false. A
 * connection that drops (or that the server closes) is opened again with `Last-Event-ID`, so a
 * stream whose messages carry ids loses nothing. A 4xx answer is thrown as an ApiError (a bad
 * filter, a refused token, no such job: trying again would not help); a 5xx is a drop.
 */
export async function followSse(o: SseOptions): Promise<SseOutcome> {
  let last = o.lastEventId;
  let done = false;
  let notStream = false;
  let failingSince: number | null = null;
  while (!done && !o.signal.aborted) {
    try {
      await new Promise<void>((resolve, reject) => {
        const u = new URL(o.url);
        const headers = { accept: 'text/event-stream', ...o.headers, ...(last !== undefined ? { 'last-event-id': last } : {}) };
        const req = u.protocol === 'https:' ? https.request(u, { headers, ...(o.ca ? { ca: o.ca } : {}) }) : http.request(u, { headers });
        const abort = () => req.destroy();
        o.signal.addEventListener('abort', abort, { once: true });
        const finish = (err?: Error) => {
          o.signal.removeEventListener('abort', abort);
          if (err && !o.signal.aborted && !done) reject(err);
          else resolve();
        };
        req.on('error', (err) => finish(err));
        req.on('response', (res) => {
          const status = res.statusCode ?? 0;
          if (status >= 400) {
            const parts: Buffer[] = [];
            res.on('data', (d: Buffer) => parts.push(d));
            res.on('end', () => finish(new ApiError(status, errorBodyOf(status, res.statusMessage ?? '', Buffer.concat(parts).toString('utf8')))));
            return;
          }
          failingSince = null;
          if (!String(res.headers['content-type'] ?? '').startsWith('text/event-stream')) {
            notStream = done = true;
            req.destroy();
            return finish();
          }
          const parser = createParser({
            onEvent: (m) => {
              if (done) return;
              if (m.id !== undefined) last = m.id;
              if (o.onMessage({ id: m.id, event: m.event, data: m.data }) === false) {
                done = true;
                req.destroy();
              }
            },
          });
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => parser.feed(chunk));
          res.on('end', () => finish(new Error('the server closed the stream')));
          res.on('error', (err) => finish(err));
        });
        req.end();
      });
    } catch (err) {
      if (err instanceof ApiError && err.status < 500) throw err;
      if (o.signal.aborted || done) break;
      const now = Date.now();
      failingSince ??= now;
      if (o.giveUpAfterMs !== undefined && now - failingSince >= o.giveUpAfterMs) {
        const code = (err as { code?: string }).code;
        throw new ConnectionError(new URL(o.url).origin, errorText(err), code);
      }
      o.onDrop?.(errorText(err));
      await sleep(o.retryMs ?? 1000, o.signal);
    }
  }
  return notStream ? 'not-a-stream' : 'stopped';
}
