import type { EventView } from '../../api/contract/job-view.js';
import { followSse, type SseOptions } from './sse-stream.js';

export interface FollowOptions extends Pick<SseOptions, 'url' | 'headers' | 'ca' | 'signal' | 'retryMs' | 'onDrop'> {
  /** Resume after this seq (what a previous stream got last). */
  lastEventId?: number;
  /** Told of each event, in seq order, once. Returning false ends the stream. */
  onEvent: (e: EventView) => boolean | void;
}

/**
 * Follows `GET /v1/events` (server-sent events) until `signal` aborts or `onEvent` returns false.
 * A connection that drops is opened again with `Last-Event-ID`, so nothing is lost and nothing
 * is told twice (events are numbered; one at or before the last seen is skipped). A 4xx answer
 * is thrown as an ApiError (a bad filter, a refused token): trying again would not help.
 */
export async function followEvents(o: FollowOptions): Promise<void> {
  let last = o.lastEventId;
  const outcome = await followSse({
    url: o.url,
    headers: o.headers,
    ...(o.ca ? { ca: o.ca } : {}),
    ...(last !== undefined ? { lastEventId: String(last) } : {}),
    signal: o.signal,
    ...(o.retryMs !== undefined ? { retryMs: o.retryMs } : {}),
    ...(o.onDrop ? { onDrop: o.onDrop } : {}),
    onMessage: (m) => {
      const e = JSON.parse(m.data) as EventView;
      if (last !== undefined && e.seq <= last) return;
      last = e.seq;
      return o.onEvent(e);
    },
  });
  if (outcome === 'not-a-stream') throw new Error(`${o.url}: the server did not answer with an event stream (a server older than GET /v1/events?)`);
}
