import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { CLI, REPO } from '../support/gantry-process.js';

/** A server whose dashboard was never built still starts: it says so once, and `/` names the problem; the API is as ever. */
it('gantry server without a dashboard build starts, says so in its log, and answers / with the problem', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-nodash-'));
  const proc = spawn(process.execPath, [CLI, 'server', '--data-dir', dir, '--port', '0', '--json'], {
    cwd: REPO,
    env: { ...process.env, GANTRY_DASHBOARD_DIR: join(dir, 'no-build') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (err += d));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`server did not start:\n${out}\n${err}`)), 20_000);
      proc.stdout.on('data', () => {
        const line = out.split('\n').find((l) => l.includes('"adminTokenFile"'));
        if (line) {
          clearTimeout(timer);
          resolve(JSON.parse(line).url);
        }
      });
    });
    await expect.poll(() => err).toMatch(/dashboard: not available: the dashboard is not built \(.*no-build\/index\.html is missing\): run `npm run build`/);
    // The log line, for whoever reads the log rather than the terminal.
    expect(out).toMatch(/"msg":"dashboard: the dashboard is not built/);
    const page = await fetch(`${url}/`);
    expect(page.status).toBe(404);
    expect(await page.text()).toMatch(/^Gantry's dashboard is not here: the dashboard is not built .*npm run build/);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
});
