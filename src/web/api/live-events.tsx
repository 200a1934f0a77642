import { createContext, useContext, useEffect, useState, type ReactNode } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { StaleSet } from './event-invalidation';
import { followEventStream, type StreamStatus } from './event-stream';
import { useSession } from './session';

/** Events of a burst are gathered this long, then each stale query is fetched again once. */
const GATHER_MS = 300;

const StatusContext = createContext<StreamStatus>({ state: 'connecting' });

/**
 * One event stream for the whole dashboard while signed in (a team token's carries its team's
 * jobs and the machines only). Each event marks the queries it changes stale (event-invalidation.ts);
 * the ones on screen are fetched again. When a connection opens, everything on screen is fetched
 * again once: what changed before the stream started (or while it was down and not replayed) is
 * then shown too.
 */
export function LiveEventsProvider({ children }: { children: ReactNode }) {
  const client = useQueryClient();
  const { token, signOut } = useSession();
  const [status, setStatus] = useState<StreamStatus>({ state: 'connecting' });
  useEffect(() => {
    if (!token) return;
    const abort = new AbortController();
    const stale = new StaleSet();
    let timer: ReturnType<typeof setTimeout> | null = null;
    const flush = () => {
      timer = null;
      for (const queryKey of stale.flush()) void client.invalidateQueries({ queryKey });
    };
    void followEventStream({
      token,
      signal: abort.signal,
      onEvent: (e) => {
        stale.add(e);
        timer ??= setTimeout(flush, GATHER_MS);
      },
      onOpen: () => void client.invalidateQueries(),
      onStatus: (s) => {
        setStatus(s);
        if (s.state === 'refused' && s.status === 401) signOut(`the server refused your token: ${s.why}`);
      },
    });
    return () => {
      abort.abort();
      if (timer) clearTimeout(timer);
    };
  }, [token, client, signOut]);
  return <StatusContext.Provider value={status}>{children}</StatusContext.Provider>;
}

export function useLiveStatus(): StreamStatus {
  return useContext(StatusContext);
}
