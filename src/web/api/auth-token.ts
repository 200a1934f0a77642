/**
 * Where the dashboard keeps its token: this tab's sessionStorage (gone when the tab closes), or
 * localStorage when the user asks to stay signed in on this browser. Either is readable by
 * scripts of this origin only; the page allows no script but its own (Content-Security-Policy,
 * docs/dashboard.md).
 */
const KEY = 'gantry.token';

export function readToken(): string | null {
  return sessionStorage.getItem(KEY) ?? localStorage.getItem(KEY);
}

export function saveToken(token: string, remember: boolean): void {
  forgetToken();
  (remember ? localStorage : sessionStorage).setItem(KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

/**
 * A sign-in link (`gantry up` prints one) carries a one-time sign-in code in the URL's fragment,
 * `#signin=…`, which browsers never send to a server, so it reaches no log. It is not a token: it
 * is exchanged once, within 15 minutes, for a session (POST /v1/sign-in; docs/security.md). Taken
 * from the address and wiped from the address bar and the history at once.
 */
export function takeSignInCodeFromFragment(): string | null {
  const m = /(?:^#|&)signin=([^&]+)/.exec(window.location.hash);
  if (!m) return null;
  const code = decodeURIComponent(m[1]!);
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search);
  return code;
}
