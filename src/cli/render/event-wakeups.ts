import type { EventView } from '../../api/contract/job-view.js';
import type { GantryClient } from '../client/gantry-client.js';

export interface EventWakeups {
  /** Resolves true when a wake-up came since the last call (at once if one did), or after `ms` anyway; false when the signal aborted. */
  next(ms: number): Promise<boolean>;
  /** The stream is not there (an older server, a refused filter): the caller polls instead. */
  failed(): boolean;
  stop(): void;
}

/**
 * The live event stream (GET /v1/events) as wake-ups for a watch: each event `onEvent` finds worth
 * it (default: every one) wakes the watcher, which then reads what it shows. The watcher waits
 * on `next`, so events that arrive while it reads are not lost, and many come as one wake-up.
 */
export function eventWakeups(
  client: Pick<GantryClient, 'followEvents'>,
  query: { job?: string; team?: string; pool?: string },
  opts: { signal?: AbortSignal; lastEventId?: number; onEvent?: (e: EventView) => boolean } = {},
): EventWakeups {
  const { signal } = opts;
  const stop = new AbortController();
  signal?.addEventListener('abort', () => stop.abort(), { once: true });
  let pending = false;
  let failed = false;
  let wake: (() => void) | null = null;
  const onEvent = (e: EventView) => {
    if (opts.onEvent && !opts.onEvent(e)) return;
    pending = true;
    wake?.();
  };
  void client
    .followEvents(query, { signal: stop.signal, onEvent, ...(opts.lastEventId !== undefined ? { lastEventId: opts.lastEventId } : {}) })
    .catch(() => ((failed = true), wake?.()));
  return {
    failed: () => failed,
    stop: () => stop.abort(),
    next(ms: number): Promise<boolean> {
      if (signal?.aborted) return Promise.resolve(false);
      if (pending) {
        pending = false;
        return Promise.resolve(true);
      }
      return new Promise((resolve) => {
        const done = (v: boolean) => {
          clearTimeout(t);
          signal?.removeEventListener('abort', aborted);
          wake = null;
          pending = false;
          resolve(v);
        };
        const aborted = () => done(false);
        const t = setTimeout(() => done(true), ms);
        signal?.addEventListener('abort', aborted, { once: true });
        wake = () => done(true);
      });
    },
  };
}
