import type { ErrorBody } from '../../api/contract/job-view';

/** An answer the API refused, with its status and what it said. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

type Unauthorized = (why: string) => void;
let current: { token: string | null; unauthorized: Unauthorized } = { token: null, unauthorized: () => {} };

/** The token requests carry, and who is told when the server refuses it (sign-out, with its reason). */
export function setRequestToken(token: string | null, unauthorized: Unauthorized): void {
  current = { token, unauthorized };
}

/** A request to the API with the signed-in token; JSON both ways. A refused token (401) signs out. */
export async function api<T>(path: string, init: RequestInit & { json?: unknown; token?: string } = {}): Promise<T> {
  const res = await send(path, init);
  return (await res.json()) as T;
}

async function send(path: string, init: RequestInit & { json?: unknown; token?: string }): Promise<Response> {
  const { json, token = current.token, ...rest } = init;
  const headers = new Headers(rest.headers);
  if (token) headers.set('authorization', `Bearer ${token}`);
  if (json !== undefined) headers.set('content-type', 'application/json');
  let res: Response;
  try {
    res = await fetch(path, { ...rest, headers, cache: 'no-store', ...(json !== undefined ? { body: JSON.stringify(json) } : {}) });
  } catch {
    throw new ApiError(0, 'unreachable', 'cannot reach the Gantry server (is it running?)');
  }
  if (res.ok) return res;
  const body = (await res.json().catch(() => null)) as ErrorBody | null;
  const err = new ApiError(res.status, body?.error ?? 'error', body?.message ?? `${res.status} ${res.statusText}`);
  // Only the token in use: a sign-in attempt with another one is answered by its own form.
  if (res.status === 401 && token === current.token) current.unauthorized(err.message);
  throw err;
}

/** `?a=1&b=x` from the values given (undefined and empty ones left out). */
export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const enc = encodeURIComponent;
