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
 * A sign-in link (`gantry up` prints one) carries the token in the URL's fragment, `#token=…`,
 * which browsers never send to a server, so it reaches no log. Taken from there into this tab's
 * storage, and wiped from the address bar and the history at once.
 */
export function takeTokenFromFragment(): string | null {
  const m = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
  if (!m) return null;
  const token = decodeURIComponent(m[1]!);
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search);
  return token;
}
