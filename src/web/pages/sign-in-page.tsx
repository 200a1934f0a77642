import { useState, type FormEvent } from 'react';
import { Navigate, useNavigate, useSearchParams } from 'react-router';
import type { WhoAmIView } from '../../api/contract/whoami-view';
import { errorText } from '../../lib/error-text';
import { api, ApiError } from '../api/api-client';
import { useSession } from '../api/session';

/** Where a signed-in user goes: the page asked for, if it is one of ours. */
function nextOf(params: URLSearchParams): string {
  const next = params.get('next');
  return next && next.startsWith('/') && !next.startsWith('//') ? next : '/jobs';
}

/**
 * Sign in with a token, as the CLI does: a team token sees its team's jobs, an admin token
 * everything. The token is checked with the server before it is kept.
 */
export function SignInPage() {
  const session = useSession();
  const [params] = useSearchParams();
  const navigate = useNavigate();
  const [token, setToken] = useState('');
  const [remember, setRemember] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  if (session.token) return <Navigate to={nextOf(params)} replace />;

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const t = token.trim();
    if (!t) return setError('Paste a token first.');
    setBusy(true);
    setError(null);
    try {
      const who = await api<WhoAmIView>('/v1/whoami', { token: t });
      session.signIn(t, remember, who);
      void navigate(nextOf(params), { replace: true });
    } catch (err) {
      setError(err instanceof ApiError && err.status === 403 ? `${err.message}. The dashboard needs a team or an admin token.` : errorText(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="signin">
      <form className="signin-card" onSubmit={(e) => void submit(e)}>
        <h1>
          <img src="/favicon.svg" alt="" width={28} height={28} /> Gantry
        </h1>
        {session.endedBecause ? (
          <p className="error-note" role="alert">
            Signed out: {session.endedBecause}
          </p>
        ) : null}
        <label htmlFor="token">Token</label>
        <input
          id="token"
          name="token"
          type="password"
          autoComplete="off"
          spellCheck={false}
          placeholder="gantry_admin_… or gantry_team_…"
          value={token}
          onChange={(e) => setToken(e.target.value)}
          autoFocus
        />
        <label className="check">
          <input type="checkbox" checked={remember} onChange={(e) => setRemember(e.target.checked)} /> Stay signed in on this browser
        </label>
        {error ? (
          <p className="error-note" role="alert">
            {error}
          </p>
        ) : null}
        <button type="submit" className="button button-primary" disabled={busy}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        <div className="signin-help">
          <p>
            <code>gantry up</code> prints a link that signs you in as its admin. Otherwise:
          </p>
          <ul>
            <li>
              the admin token, from the server's data directory: <code className="block">cat .gantry/admin.token</code>
            </li>
            <li>
              a team's, made by an admin: <code className="block">gantry token create --team ml --name "ml dashboard"</code>
            </li>
          </ul>
          <p className="muted">Without “stay signed in”, the token is kept in this tab only and forgotten when it closes.</p>
        </div>
      </form>
    </main>
  );
}
