import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { JobView } from '../../api/contract/job-view.js';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { runSubmit } from './submit-command.js';

const dir = mkdtempSync(join(tmpdir(), 'gantry-cli-submit-'));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const GOOD = file('good.yaml', 'name: demo\nstages:\n  - name: a\n    command: [echo, hi]\n');

function captureIo(over: Partial<CliIo> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, color: false, ...over };
  return { io, stdout: () => out.join(''), stderr: () => err.join('') };
}

const job = (state: JobView['state'], over: Partial<JobView> = {}): JobView => ({
  id: 'j_1',
  name: 'demo',
  team: 'default',
  priority: 0,
  labels: {},
  state,
  failureReason: null,
  cancelRequestedAt: null,
  createdAt: 0,
  updatedAt: 0,
  finishedAt: null,
  stages: [],
  ...over,
});

/** A fake Gantry: POST /v1/jobs answers `submit`; GET /v1/jobs/j_1 answers the next of `polls` (the last repeats). */
async function fakeGantry(submit: { status: number; body: unknown }, polls: JobView[] = []) {
  const posted: unknown[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const send = (r: ServerResponse, status: number, b: unknown) => r.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(b));
      if (req.method === 'POST' && req.url === '/v1/jobs') {
        posted.push(JSON.parse(body));
        return send(res, submit.status, submit.body);
      }
      // A server without the event stream: the watch polls it (each poll takes the next view).
      if (req.url?.startsWith('/v1/events')) return send(res, 404, { error: 'not_found', message: 'no such route' });
      const next = polls.length > 1 ? polls.shift() : polls[0];
      return next ? send(res, 200, next) : send(res, 404, { error: 'not_found', message: 'job j_1 not found' });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  closers.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url, posted };
}
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
});

describe('runSubmit', () => {
  it('exits 2 naming the file, line and column of a YAML syntax error, without calling the server', async () => {
    const bad = file('bad.yaml', 'name: demo\nstages:\n  - name: a\n   command: [echo\n');
    const { io, stderr, stdout } = captureIo();
    const code = await runSubmit(bad, { server: 'http://127.0.0.1:9' }, io);
    expect(code).toBe(ExitCode.usage);
    expect(stderr()).toMatch(new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: line \\d+, column \\d+: `));
    expect(stdout()).toBe('');
  });

  it('exits 2 on a file past the bounds the server reads within, with its message, without calling the server', async () => {
    const deep = file('deep.yaml', `name: demo\nstages:\n  - name: a\n    command: ${'['.repeat(1 << 20)}\n`);
    const laughs = file('laughs.yaml', `jobs:\n${Array.from({ length: 101 }, (_, i) => `  - &j${i} { name: j${i}, stages: [] }`).join('\n')}\n`);
    for (const [f, message] of [
      [deep, 'line 4, column 43: the file nests deeper than 32 levels'],
      [laughs, 'line 102, column 5: the file has more than 100 YAML anchors (&name)'],
    ] as const) {
      const { io, stderr, stdout } = captureIo();
      expect(await runSubmit(f, { server: 'http://127.0.0.1:9' }, io)).toBe(ExitCode.usage);
      expect(stderr()).toContain(`gantry: ${f}: ${message}`);
      expect(stdout()).toBe('');
    }
  });

  it('exits 2 when the file cannot be read', async () => {
    const { io, stderr } = captureIo();
    expect(await runSubmit(join(dir, 'missing.yaml'), { server: 'http://127.0.0.1:9' }, io)).toBe(ExitCode.usage);
    expect(stderr()).toBe(`gantry: cannot read ${join(dir, 'missing.yaml')}: no such file\n`);
  });

  it('prints each issue of a rejected spec under the file name and exits 2', async () => {
    const gantry = await fakeGantry({
      status: 400,
      body: {
        error: 'invalid_request',
        message: 'two problems',
        issues: [
          { path: '/stages/0/resources/memory', message: '"lots" is not a memory quantity' },
          { path: '/stages/1/needs/0', message: 'unknown stage "prep"' },
        ],
      },
    });
    const { io, stderr, stdout } = captureIo();
    expect(await runSubmit(GOOD, { server: gantry.url }, io)).toBe(ExitCode.usage);
    expect(stderr()).toBe(
      `${GOOD}: invalid job spec\n  /stages/0/resources/memory: "lots" is not a memory quantity\n  /stages/1/needs/0: unknown stage "prep"\n`,
    );
    expect(stdout()).toBe('');
    expect(gantry.posted).toEqual([{ name: 'demo', stages: [{ name: 'a', command: ['echo', 'hi'] }] }]);
  });

  it('prints the job id, or the JobView with --json', async () => {
    const gantry = await fakeGantry({ status: 201, body: job('queued') });
    const plain = captureIo();
    expect(await runSubmit(GOOD, { server: gantry.url }, plain.io)).toBe(ExitCode.ok);
    expect(plain.stdout()).toBe('j_1\n');
    const json = captureIo();
    expect(await runSubmit(GOOD, { server: gantry.url, json: true }, json.io)).toBe(ExitCode.ok);
    expect(JSON.parse(json.stdout())).toMatchObject({ id: 'j_1', state: 'queued' });
  });

  it('exits 5 when the server is unreachable', async () => {
    const gantry = await fakeGantry({ status: 201, body: job('queued') });
    await Promise.all(closers.splice(0).map((c) => c()));
    const { io, stderr } = captureIo();
    expect(await runSubmit(GOOD, { server: gantry.url }, io)).toBe(ExitCode.unreachable);
    expect(stderr()).toMatch(/^gantry: cannot reach Gantry at http:\/\/127\.0\.0\.1:\d+: .*ECONNREFUSED.*; is it running\? \(gantry up\)\n$/);
  });

  it.each<[JobView['state'], number]>([
    ['succeeded', ExitCode.ok],
    ['failed', ExitCode.failed],
    ['canceled', ExitCode.canceled],
  ])('--wait exits with the code for %s', async (state, expected) => {
    const gantry = await fakeGantry({ status: 201, body: job('queued') }, [
      job('running'),
      job(state, { failureReason: state === 'failed' ? 'stage a failed: exit code 1' : null }),
    ]);
    const { io, stdout, stderr } = captureIo();
    expect(await runSubmit(GOOD, { server: gantry.url, wait: true, interval: 5 }, io)).toBe(expected);
    expect(stdout()).toBe('j_1\n');
    expect(stderr()).toContain(`job j_1 ${state}`);
  });

  it('--watch off a TTY prints plain lines with no terminal control codes', async () => {
    const stage = {
      name: 'a',
      pool: 'default',
      needs: [],
      pendingReason: null,
      endReason: null,
      resources: { cpuMillis: 1000, memoryBytes: 1, gpu: null },
      attemptsUsed: 0,
      maxAttempts: 3,
      lostUsed: 0,
      outputAttemptId: null,
      readySince: null,
      notBefore: null,
      finishedAt: null,
      attempts: [],
    };
    const gantry = await fakeGantry({ status: 201, body: job('queued') }, [
      job('queued', { stages: [{ ...stage, state: 'ready', pendingReason: 'waiting for capacity' }] }),
      job('succeeded', { finishedAt: 1, stages: [{ ...stage, state: 'succeeded' }] }),
    ]);
    const { io, stdout } = captureIo();
    expect(await runSubmit(GOOD, { server: gantry.url, watch: true, interval: 5 }, io)).toBe(ExitCode.ok);
    const lines = stdout().trimEnd().split('\n');
    expect(lines[0]).toBe('j_1');
    expect(lines.slice(1).map((l) => l.replace(/^\d\d:\d\d:\d\d /, ''))).toEqual(['a ready: waiting for capacity', 'a succeeded', 'job demo succeeded']);
    expect(stdout()).not.toMatch(/\u001b/);
  });

  it('Ctrl-C while waiting stops watching with 130 and leaves the job alone', async () => {
    const gantry = await fakeGantry({ status: 201, body: job('queued') }, [job('running')]);
    const controller = new AbortController();
    const { io, stderr } = captureIo({ signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    expect(await runSubmit(GOOD, { server: gantry.url, wait: true, interval: 5 }, io)).toBe(ExitCode.interrupted);
    expect(stderr()).toContain('stopped watching j_1; it keeps running');
  });
});
