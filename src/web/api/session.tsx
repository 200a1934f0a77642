import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import type { WhoAmIView } from '../../api/contract/whoami-view';
import type { SignInView } from '../../api/contract/sign-in-view';
import { api, setRequestToken } from './api-client';
import { forgetToken, readToken, saveToken, takeSignInCodeFromFragment } from './auth-token';
import { queryKeys } from './query-keys';

export interface Session {
  token: string | null;
  /** Who the token is, once the server said so. */
  who: WhoAmIView | null;
  /** Why the last session ended, when the server ended it (a revoked or expired token). */
  endedBecause: string | null;
  signIn(token: string, remember: boolean, who: WhoAmIView): void;
  signOut: (why?: string) => void;
}

const SessionContext = createContext<Session | null>(null);

/** The token requests and the event stream use, from a sign-in link, this tab's storage, or the sign-in page. */
export function SessionProvider({ children }: { children: ReactNode }) {
  const client = useQueryClient();
  const [token, setToken] = useState<string | null>(() => readToken());
  // A sign-in link's one-time code, taken from the address once; exchanged below for a session.
  const [code] = useState<string | null>(() => takeSignInCodeFromFragment());
  const [endedBecause, setEndedBecause] = useState<string | null>(null);
  const signOut = useCallback(
    (why?: string) => {
      forgetToken();
      setToken(null);
      setEndedBecause(why ?? null);
      client.clear();
    },
    [client],
  );
  // Set during render, not in an effect: the queries below must carry the token from their first request.
  setRequestToken(token, (why) => signOut(`the server refused your token: ${why}`));
  const whoami = useQuery({
    queryKey: queryKeys.whoami(token),
    queryFn: () => api<WhoAmIView>('/v1/whoami'),
    enabled: token !== null,
    staleTime: Infinity,
    retry: false,
  });
  const signIn = useCallback(
    (t: string, remember: boolean, who: WhoAmIView) => {
      saveToken(t, remember);
      client.setQueryData(queryKeys.whoami(t), who);
      setEndedBecause(null);
      setToken(t);
    },
    [client],
  );
  // A code signs in once: the exchange is sent once, even where React runs an effect twice.
  const exchanged = useRef(false);
  useEffect(() => {
    if (!code || exchanged.current) return;
    exchanged.current = true;
    void api<SignInView>('/v1/sign-in', { method: 'POST', json: { code }, token: '' }).then(
      (r) => signIn(r.token, false, r.who),
      (err: unknown) => setEndedBecause(`the sign-in link did not sign you in: ${err instanceof Error ? err.message : String(err)}`),
    );
  }, [code, signIn]);
  const value = useMemo<Session>(
    () => ({ token, who: whoami.data ?? null, endedBecause, signIn, signOut }),
    [token, whoami.data, endedBecause, signIn, signOut],
  );
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): Session {
  const s = useContext(SessionContext);
  if (!s) throw new Error('useSession outside SessionProvider');
  return s;
}
