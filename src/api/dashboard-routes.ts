import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/** One file of the built dashboard, held in memory. */
export interface DashboardFile {
  body: Buffer;
  type: string;
  etag: string;
  /** Its gzipped form, made at its first request that takes gzip (not at start: a server restarting in a loop should not pay for it); null where gzip would not help. */
  gzip?: Buffer | null;
}

/** Worth compressing: text over a KiB. */
const TEXT = /^(text\/|application\/json|image\/svg)/;

function gzipped(file: DashboardFile): Buffer | null {
  if (file.gzip === undefined) {
    const gz = TEXT.test(file.type) && file.body.length > 1024 ? gzipSync(file.body) : null;
    file.gzip = gz && gz.length < file.body.length ? gz : null;
  }
  return file.gzip;
}

/** The built dashboard (`dist/web`), read once when the server starts; or why there is none. */
export type Dashboard = { files: ReadonlyMap<string, DashboardFile>; problem: null } | { files: null; problem: string };

/**
 * The dashboard is the API's own client: it reads only the routes a token may read. Its page may
 * run only its own scripts and talk only to this origin, so an injected script could not send a
 * token elsewhere (the token is in the browser's storage: docs/dashboard.md).
 */
const PAGE_HEADERS = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

/** Paths that are the server's own: never answered with the dashboard's page. */
const SERVER_PATHS = /^\/(v1|metrics|healthz|openapi\.json)(\/|$)/;

/**
 * The dashboard at `/`: its files (Vite's hashed assets, cached for good), and its page
 * (`index.html`) for every other path that is not the API's, so that a link to `/jobs/…` opened
 * in a new tab reaches the client-side router. A path that names a file that is not there (it has
 * a dot in its last segment) is a 404, not the page. Without a build, `/` says what is missing.
 * Open, like `/openapi.json`: the files hold no data; everything shown comes from the API, with a token.
 */
export function dashboardRoutes(app: FastifyInstance, dashboard: Dashboard): void {
  const serve = async (req: FastifyRequest, reply: FastifyReply) => {
    const path = decodePath(req.url);
    if (path === null || SERVER_PATHS.test(path)) return reply.callNotFound();
    if (dashboard.files === null) {
      if (path !== '/') return reply.callNotFound();
      return reply
        .status(404)
        .type('text/plain; charset=utf-8')
        .send(`Gantry's dashboard is not here: ${dashboard.problem}\nThe API is at /v1 (its description: /openapi.json).\n`);
    }
    const file = dashboard.files.get(path);
    if (file) return send(req, reply, file, path.startsWith('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache');
    if (/\.[^/]*$/.test(path)) return reply.callNotFound();
    return send(req, reply, dashboard.files.get('/index.html')!, 'no-cache');
  };
  app.get('/', { schema: { hide: true }, config: { access: 'open' } }, serve);
  app.get('/*', { schema: { hide: true }, config: { access: 'open' } }, serve);
}

function send(req: FastifyRequest, reply: FastifyReply, file: DashboardFile, cache: string) {
  void reply.headers({ 'cache-control': cache, etag: file.etag, vary: 'accept-encoding' });
  if (file.type.startsWith('text/html')) void reply.headers(PAGE_HEADERS);
  if (req.headers['if-none-match'] === file.etag) return reply.status(304).send();
  void reply.type(file.type);
  const gz = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? '')) ? gzipped(file) : null;
  if (gz) return reply.header('content-encoding', 'gzip').send(gz);
  return reply.send(file.body);
}

/** The request's path without its query, decoded; null when it does not decode. */
function decodePath(url: string): string | null {
  const raw = url.split('?')[0]!.split('#')[0]!;
  try {
    return decodeURIComponent(raw);
  } catch {
    return null;
  }
}

/** A file's ETag: its content's hash, so a rebuilt file is fetched again and an unchanged one is not. */
export function etagOf(body: Buffer): string {
  return `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
}
