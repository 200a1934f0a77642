import { createParser } from 'eventsource-parser';
import type { EventView } from '../../api/contract/job-view';
import { errorText } from '../../lib/error-text';
import { backoffDelay } from '../../lib/backoff-delay';
import { sleep as abortableSleep } from '../../lib/sleep';

/** Where the stream stands, for the "live" indicator. */
export type StreamStatus =
  | { state: 'connecting' }
  | { state: 'live'; since: number }
  | { state: 'reconnecting'; why: string; retryAt: number; failures: number }
  | { state: 'refused'; status: number; why: string };

export interface EventStreamOptions {
  token: string;
  onEvent: (e: EventView) => void;
  onStatus: (s: StreamStatus) => void;
  /** Each time a connection opens (the first, and every reconnection). */
  onOpen?: () => void;
  signal: AbortSignal;
  path?: string;
  fetch?: typeof fetch;
  now?: () => number;
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  random?: () => number;
}

/** 1 s doubling to 15 s, ±25 %: tabs that lost the server together do not come back together. */
const RECONNECT = { baseMs: 1000, maxMs: 15_000, jitter: [0.75, 1.25] } as const;

/**
 * Follows `GET /v1/events` until `signal` aborts. EventSource cannot send an Authorization
 * header, so this is fetch and a server-sent-events parser. A connection that drops is opened
 * again, with `Last-Event-ID` from the last event got, after a backoff (1 s doubling to 15 s,
 * with jitter): the server replays what was missed from its event log, so nothing is lost, and
 * an event at or before the last one seen is not told twice. A 4xx answer (a refused token) ends
 * it: trying again would not help.
 */
export async function followEventStream(o: EventStreamOptions): Promise<void> {
  const doFetch = o.fetch ?? globalThis.fetch.bind(globalThis);
  const now = o.now ?? Date.now;
  const sleep = o.sleep ?? abortableSleep;
  const random = o.random ?? Math.random;
  let last: number | undefined;
  let failures = 0;
  while (!o.signal.aborted) {
    if (failures === 0) o.onStatus({ state: 'connecting' });
    try {
      const headers: Record<string, string> = { authorization: `Bearer ${o.token}`, accept: 'text/event-stream' };
      if (last !== undefined) headers['last-event-id'] = String(last);
      const res = await doFetch(o.path ?? '/v1/events', { headers, signal: o.signal, cache: 'no-store' });
      if (res.status >= 400 && res.status < 500 && res.status !== 429) {
        const body = (await res.json().catch(() => null)) as { message?: string } | null;
        o.onStatus({ state: 'refused', status: res.status, why: body?.message ?? res.statusText });
        return;
      }
      if (!res.ok || !res.body) throw new Error(`the server answered ${res.status}`);
      failures = 0;
      o.onStatus({ state: 'live', since: now() });
      o.onOpen?.();
      const parser = createParser({
        onEvent: (m) => {
          const e = JSON.parse(m.data) as EventView;
          if (last !== undefined && e.seq <= last) return;
          last = e.seq;
          o.onEvent(e);
        },
      });
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.feed(value);
      }
      throw new Error('the server closed the stream');
    } catch (err) {
      if (o.signal.aborted) return;
      failures++;
      const delay = backoffDelay(RECONNECT, failures, random());
      o.onStatus({ state: 'reconnecting', why: describe(err), retryAt: now() + delay, failures });
      await sleep(delay, o.signal);
    }
  }
}

function describe(err: unknown): string {
  const m = errorText(err);
  // Browsers say "Failed to fetch" / "network error" for a server that is down or a cut connection.
  return /fetch|network/i.test(m) ? 'cannot reach the server' : m;
}
