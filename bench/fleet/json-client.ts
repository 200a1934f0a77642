import { Agent, request } from 'node:http';
import { retryAfterMs } from '../../src/lib/retry-after.js';

/** Now on the clock every process on this host shares (ms, µs digits): the server's `x-gantry-timing` is on it too. */
const hostNow = () => performance.timeOrigin + performance.now();

/** A refused or failed request: the status (0 when no answer came) and what the server said. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The error's `error` code and Retry-After (ms), when the server sent them. */
    readonly code: string | null = null,
    readonly retryAfterMs: number | null = null,
  ) {
    super(message);
  }
}

/**
 * JSON over HTTP for one simulated agent: its own keep-alive connection pool (`node:http`'s Agent,
 * unbounded: its long-poll and its report each hold a connection, as a real agent's do), no
 * per-request setup beyond the request itself. One pool for the whole fleet cost the fleet a
 * linear search of its 10,000 sockets per request (bench/fleet/fleet.ts).
 * A killed agent's requests are aborted, which closes their connections: the server sees a held
 * heartbeat's caller hang up, as it would when a machine dies.
 */
export class JsonClient {
  private readonly pool = new Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 100_000, keepAliveMsecs: 30_000 });

  /** POST `body` to `url` with `token`; resolves with the parsed answer of a 2xx, rejects with an HttpError otherwise. An abort destroys the connection. */
  async post<T>(url: URL, body: unknown, token: string, signal?: AbortSignal): Promise<T> {
    return (await this.postTimed<T>(url, body, token, signal)).body;
  }

  /**
   * As `post`, with the times on the host's clock (`performance.timeOrigin + performance.now()`,
   * ms) the request was handed to its socket and its answer read whole, and the server's
   * `x-gantry-timing` header if it sent one (a heartbeat's, with GANTRY_HEARTBEAT_TIMING=1).
   */
  postTimed<T>(url: URL, body: unknown, token: string, signal?: AbortSignal): Promise<{ body: T; sentAt: number; readAt: number; timing: string | null }> {
    const payload = JSON.stringify(body);
    let sentAt = 0;
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          agent: this.pool,
          signal,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), authorization: `Bearer ${token}` },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            const status = res.statusCode ?? 0;
            if (status >= 200 && status < 300) {
              try {
                const readAt = hostNow();
                const timing = res.headers['x-gantry-timing'];
                resolve({ body: JSON.parse(text) as T, sentAt, readAt, timing: typeof timing === 'string' ? timing : null });
              } catch (err) {
                reject(new HttpError(status, `POST ${url.pathname}: unreadable answer (${String(err)})`));
              }
            } else {
              let code: string | null = null;
              try {
                code = (JSON.parse(text) as { error?: string }).error ?? null;
              } catch {
                // Not JSON: no code.
              }
              reject(
                new HttpError(
                  status,
                  `POST ${url.pathname}: ${status} ${text.slice(0, 300)}`,
                  code,
                  retryAfterMs(res.headers['retry-after'], Date.now(), 30_000),
                ),
              );
            }
          });
        },
      );
      req.on('error', (err) => reject(new HttpError(0, `POST ${url.pathname}: ${err.message}`)));
      sentAt = hostNow();
      req.end(payload);
    });
  }

  /** Closes every connection, idle or not. */
  close(): void {
    this.pool.destroy();
  }
}
