import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { etagOf, type Dashboard, type DashboardFile } from '../api/dashboard-routes.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2',
};
/** A build is a few hundred KiB; anything far larger in that directory is not the dashboard's. */
const MAX_BYTES = 32 * 2 ** 20;

const loaded = new Map<string, Dashboard>();

/**
 * The built dashboard in `dir` (Vite's output, `dist/web`), read into memory once per process:
 * the server answers only the files that were there, so no request path ever reaches the disk.
 * Without `index.html`, the reason, which the server logs and `/` answers.
 */
export function loadDashboard(dir: string): Dashboard {
  let d = loaded.get(dir);
  if (!d) {
    d = read(dir);
    loaded.set(dir, d);
  }
  return d;
}

function read(dir: string): Dashboard {
  if (!existsSync(join(dir, 'index.html'))) {
    return { files: null, problem: `the dashboard is not built (${join(dir, 'index.html')} is missing): run \`npm run build\`, which builds it into dist/web` };
  }
  const files = new Map<string, DashboardFile>();
  let total = 0;
  const walk = (at: string) => {
    for (const name of readdirSync(at)) {
      const path = join(at, name);
      const st = statSync(path);
      if (st.isDirectory()) walk(path);
      else if (st.isFile()) {
        total += st.size;
        if (total > MAX_BYTES) throw new Error(`${dir} holds over ${MAX_BYTES / 2 ** 20} MiB: not a dashboard build (GANTRY_DASHBOARD_DIR?)`);
        const body = readFileSync(path);
        const type = TYPES[extname(name).toLowerCase()] ?? 'application/octet-stream';
        files.set(`/${relative(dir, path).split(sep).join('/')}`, { body, type, etag: etagOf(body) });
      }
    }
  };
  walk(dir);
  return { files, problem: null };
}
