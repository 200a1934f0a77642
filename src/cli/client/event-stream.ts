import http from 'node:http';
import https from 'node:https';
import { createParser } from 'eventsource-parser';
import type { EventView } from '../../api/contract/job-view.js';

export interface FollowOptions {
  url: string;
  headers: Record<string, string>;
  ca?: string;
  /** Resume after this seq (what a previous stream got last). */
  lastEventId?: number;
  signal: AbortSignal;
  /** Told of each event, in seq order, once. Returning false ends the stream. */
  onEvent: (e: EventView) => boolean | void;
  /** A dropped connection is opened again after this long, resuming after the last event got. */
  retryMs?: number;
  /** Told when a connection drops (and is tried again). */
  onDrop?: (why: string) => void;
}

/**
 * Follows `GET /v1/events` (server-sent events) until `signal` aborts or `onEvent` returns false.
 * A connection that drops is opened again with `Last-Event-ID`, so nothing is lost and nothing
 * is told twice (events are numbered; one at or before the last seen is skipped). A 4xx answer
 * is thrown (a bad filter, a refused token): trying again would not help.
 */
export async function followEvents(o: FollowOptions): Promise<void> {
  let last = o.lastEventId;
  let done = false;
  while (!done && !o.signal.aborted) {
    try {
      await new Promise<void>((resolve, reject) => {
        const u = new URL(o.url);
        const headers = { accept: 'text/event-stream', ...o.headers, ...(last !== undefined ? { 'last-event-id': String(last) } : {}) };
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
          if ((res.statusCode ?? 0) >= 400) {
            const parts: Buffer[] = [];
            res.on('data', (d: Buffer) => parts.push(d));
            res.on('end', () => finish(Object.assign(new Error(`${res.statusCode} ${Buffer.concat(parts).toString('utf8').slice(0, 300)}`), { status: res.statusCode })));
            return;
          }
          const parser = createParser({
            onEvent: (m) => {
              if (done) return;
              const e = JSON.parse(m.data) as EventView;
              if (last !== undefined && e.seq <= last) return;
              last = e.seq;
              if (o.onEvent(e) === false) {
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
      if ((err as { status?: number }).status !== undefined && (err as { status: number }).status < 500) throw err;
      if (o.signal.aborted || done) return;
      o.onDrop?.((err as Error).message);
      await new Promise((r) => setTimeout(r, o.retryMs ?? 1000));
    }
  }
}
