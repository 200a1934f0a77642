import http from 'node:http';
import https from 'node:https';

export interface HttpAnswer {
  status: number;
  statusText: string;
  text: string;
  /** The body as it came (an output file is not text). */
  bytes: Buffer;
  /** Seconds, from a 429's Retry-After. */
  retryAfter: number | null;
}

/**
 * One request with its answer read whole, over node:http(s) rather than fetch: Node 20's fetch
 * cannot be told to trust a private CA (`ca`), and a CLI command's answers are small.
 * Rejects with the socket's error (code ECONNREFUSED, a certificate's code …) or a TimeoutError.
 */
export function httpCall(
  url: string,
  opts: { method: string; headers: Record<string, string>; body?: string; timeoutMs: number; ca?: string },
): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const secure = u.protocol === 'https:';
    const headers = { ...opts.headers, ...(opts.body !== undefined ? { 'content-length': String(Buffer.byteLength(opts.body)) } : {}) };
    const req = secure
      ? https.request(u, { method: opts.method, headers, ...(opts.ca ? { ca: opts.ca } : {}) })
      : http.request(u, { method: opts.method, headers });
    const timer = setTimeout(
      () => req.destroy(Object.assign(new Error(`no answer within ${opts.timeoutMs / 1000}s`), { name: 'TimeoutError' })),
      opts.timeoutMs,
    );
    req.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      res.on('end', () => {
        clearTimeout(timer);
        const after = Number(res.headers['retry-after']);
        const bytes = Buffer.concat(parts);
        resolve({
          status: res.statusCode ?? 0,
          statusText: res.statusMessage ?? '',
          text: bytes.toString('utf8'),
          bytes,
          retryAfter: Number.isFinite(after) && after >= 0 ? after : null,
        });
      });
    });
    req.end(opts.body);
  });
}

/** Codes of a certificate the client does not trust (its CA unknown, a name that does not match). */
export const UNTRUSTED_CERTIFICATE = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);
