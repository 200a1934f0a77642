import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, REPO } from '../support/gantry-process.js';

/**
 * `gantry events JOB | head` (issue 28): the reader goes away while the CLI still writes. The
 * built CLI must stop quietly with 141 (128 + SIGPIPE, as a Unix tool killed by it), not print
 * Node's EPIPE stack trace.
 */
const events = Array.from({ length: 5000 }, (_, i) => ({
  seq: i + 1,
  at: 0,
  type: 'stage:running',
  jobId: 'job_1',
  stageName: 'train',
  attemptId: null,
  machineId: null,
  message: `event ${i + 1} ${'x'.repeat(200)}`,
}));
const server = createServer((req, res) => {
  const u = new URL(req.url ?? '/', 'http://x');
  res.setHeader('content-type', 'application/json');
  if (u.pathname === '/v1/jobs/job_1/events') {
    const after = Number(u.searchParams.get('after') ?? 0);
    return res.end(JSON.stringify({ events: events.filter((e) => e.seq > after).slice(0, 1000) }));
  }
  res.statusCode = 404;
  res.end(JSON.stringify({ error: 'not_found', message: 'nope' }));
});
let url = '';
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe('gantry events JOB | head', () => {
  it('exits 141 without a word on stderr once its reader has gone', async () => {
    const proc = spawn(process.execPath, [CLI, 'events', 'job_1', '--server', url, '--token', 'x'], {
      cwd: REPO,
      env: { ...process.env, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d) => (stderr += d));
    // head: read the first chunk, then close the pipe while the CLI has ~1 MB more to write.
    proc.stdout.once('data', () => proc.stdout.destroy());
    const code = await new Promise<number | null>((r) => proc.on('close', (c) => r(c)));
    expect(stderr).toBe('');
    expect(code).toBe(141);
  });
});
