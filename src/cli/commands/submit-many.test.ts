import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { runSubmit } from './submit-command.js';

const dir = mkdtempSync(join(tmpdir(), 'gantry-cli-submit-many-'));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const LIST = file(
  'list.yaml',
  'jobs:\n  - name: a\n    stages: [{ name: s, command: [echo, a] }]\n  - name: b\n    stages: [{ name: s, command: [echo, b] }]\n',
);
const DOCS = file('docs.yaml', 'name: a\nstages: [{ name: s, command: [echo, a] }]\n---\nname: b\nstages: [{ name: s, command: [echo, b] }]\n');
const SWEEP = file(
  'sweep.yaml',
  'name: train\nsweep: { lr: [0.1, 0.01], seed: [1, 2] }\nstages:\n  - name: fit\n    command: [python3, train.py, "--lr=${sweep.lr}"]\n    env: { SEED: "${sweep.seed}" }\n',
);

function captureIo(over: Partial<CliIo> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, color: false, ...over };
  return { io, stdout: () => out.join(''), stderr: () => err.join('') };
}

/**
 * A fake Gantry: POST /v1/jobs/batch answers `batch` (by default ids j_1, j_2, … for the jobs
 * posted); GET /v1/jobs/j_N answers the next of `states[j_N]` (the last repeats).
 */
async function fakeGantry(opts: { batch?: { status: number; body: unknown }; states?: Record<string, string[]> } = {}) {
  const posted: { url: string; body: unknown }[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const send = (r: ServerResponse, status: number, b: unknown) => r.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(b));
      if (req.method === 'POST') {
        const parsed = JSON.parse(body) as { jobs: { name: string }[] };
        posted.push({ url: req.url!, body: parsed });
        if (opts.batch) return send(res, opts.batch.status, opts.batch.body);
        return send(res, 201, { jobs: parsed.jobs.map((j, i) => ({ id: `j_${i + 1}`, name: j.name })) });
      }
      const id = req.url!.split('/').at(-1)!;
      const list = opts.states?.[id];
      if (!list) return send(res, 404, { error: 'not_found', message: `job ${id} not found` });
      const state = list.length > 1 ? list.shift()! : list[0]!;
      return send(res, 200, {
        id,
        name: id,
        team: 'default',
        priority: 50,
        labels: {},
        state,
        failureReason: state === 'failed' ? 'stage s failed: exit code 1' : null,
        cancelRequestedAt: null,
        createdAt: 0,
        updatedAt: 0,
        finishedAt: null,
        stages: [],
      });
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

describe('runSubmit with several jobs', () => {
  it('sends a jobs: list as one batch and prints the ids one a line, or the list with --json', async () => {
    const gantry = await fakeGantry();
    const plain = captureIo();
    expect(await runSubmit(LIST, { server: gantry.url }, plain.io)).toBe(ExitCode.ok);
    expect(plain.stdout()).toBe('j_1\nj_2\n');
    expect(gantry.posted).toEqual([
      {
        url: '/v1/jobs/batch',
        body: {
          jobs: [
            { name: 'a', stages: [{ name: 's', command: ['echo', 'a'] }] },
            { name: 'b', stages: [{ name: 's', command: ['echo', 'b'] }] },
          ],
        },
      },
    ]);
    const json = captureIo();
    expect(await runSubmit(LIST, { server: gantry.url, json: true }, json.io)).toBe(ExitCode.ok);
    expect(JSON.parse(json.stdout())).toEqual([
      { id: 'j_1', name: 'a' },
      { id: 'j_2', name: 'b' },
    ]);
  });

  it('sends --- separated documents as one batch', async () => {
    const gantry = await fakeGantry();
    const { io, stdout } = captureIo();
    expect(await runSubmit(DOCS, { server: gantry.url }, io)).toBe(ExitCode.ok);
    expect(stdout()).toBe('j_1\nj_2\n');
    expect((gantry.posted[0]!.body as { jobs: { name: string }[] }).jobs.map((j) => j.name)).toEqual(['a', 'b']);
  });

  it('expands a sweep into plain specs before sending them', async () => {
    const gantry = await fakeGantry();
    const { io, stdout } = captureIo();
    expect(await runSubmit(SWEEP, { server: gantry.url }, io)).toBe(ExitCode.ok);
    expect(stdout()).toBe('j_1\nj_2\nj_3\nj_4\n');
    const jobs = (gantry.posted[0]!.body as { jobs: { name: string; stages: { command: string[]; env: Record<string, string> }[] }[] }).jobs;
    expect(jobs.map((j) => [j.name, j.stages[0]!.command[2], j.stages[0]!.env.SEED])).toEqual([
      ['train-lr_0.1-seed_1', '--lr=0.1', '1'],
      ['train-lr_0.1-seed_2', '--lr=0.1', '2'],
      ['train-lr_0.01-seed_1', '--lr=0.01', '1'],
      ['train-lr_0.01-seed_2', '--lr=0.01', '2'],
    ]);
    expect(jobs.every((j) => !('sweep' in j))).toBe(true);
  });

  it('exits 2 on a bad sweep without calling the server, naming the file and the path', async () => {
    const bad = file('bad-sweep.yaml', 'name: t\nsweep: { lr: [] }\nstages: [{ name: s, command: [echo, "${sweep.lrr}"] }]\n');
    const { io, stderr, stdout } = captureIo();
    expect(await runSubmit(bad, { server: 'http://127.0.0.1:9' }, io)).toBe(ExitCode.usage);
    expect(stderr()).toBe(
      `gantry: ${bad}: /sweep/lr: must be a non-empty list of values, got an empty list\n` +
        `gantry: ${bad}: /stages/0/command/1: unknown sweep parameter "lrr" in \${sweep.lrr} (did you mean "lr"?); the sweep has lr\n`,
    );
    expect(stdout()).toBe('');
  });

  it('prints each problem of a refused batch with the name of its job, and exits 2', async () => {
    const gantry = await fakeGantry({
      batch: {
        status: 400,
        body: { error: 'invalid_request', message: 'one problem', issues: [{ path: '/jobs/2/stages/0/command', message: 'must not be empty' }] },
      },
    });
    const { io, stderr, stdout } = captureIo();
    expect(await runSubmit(SWEEP, { server: gantry.url }, io)).toBe(ExitCode.usage);
    expect(stderr()).toBe(`${SWEEP}: invalid job specs; none was submitted\n  /jobs/2/stages/0/command: must not be empty (job train-lr_0.01-seed_1)\n`);
    expect(stdout()).toBe('');
  });

  it.each([
    [['succeeded', 'succeeded'], ExitCode.ok],
    [['succeeded', 'failed'], ExitCode.failed],
    [['canceled', 'succeeded'], ExitCode.canceled],
    [['canceled', 'failed'], ExitCode.failed],
  ])('--wait follows every job: %j exits %i', async (ends, expected) => {
    const gantry = await fakeGantry({ states: { j_1: ['queued', 'running', ends[0]!], j_2: ['running', ends[1]!] } });
    const { io, stdout, stderr } = captureIo();
    expect(await runSubmit(LIST, { server: gantry.url, wait: true, interval: 5 }, io)).toBe(expected);
    expect(stdout()).toBe('j_1\nj_2\n');
    expect(stderr()).toMatch(/^2 jobs: /);
    if (ends.includes('failed')) expect(stderr()).toContain('(b) failed: stage s failed: exit code 1');
  });

  it('--wait --json prints the final states once', async () => {
    const gantry = await fakeGantry({ states: { j_1: ['succeeded'], j_2: ['running', 'failed'] } });
    const { io, stdout } = captureIo();
    expect(await runSubmit(LIST, { server: gantry.url, wait: true, json: true, interval: 5 }, io)).toBe(ExitCode.failed);
    expect(JSON.parse(stdout())).toEqual([
      { id: 'j_1', name: 'a', state: 'succeeded', failureReason: null },
      { id: 'j_2', name: 'b', state: 'failed', failureReason: 'stage s failed: exit code 1' },
    ]);
  });

  it('--watch off a TTY prints a line of counts by state whenever they change', async () => {
    const gantry = await fakeGantry({ states: { j_1: ['queued', 'running', 'running', 'succeeded'], j_2: ['queued', 'queued', 'succeeded'] } });
    const { io, stdout } = captureIo();
    expect(await runSubmit(LIST, { server: gantry.url, watch: true, interval: 5 }, io)).toBe(ExitCode.ok);
    const lines = stdout().trimEnd().split('\n');
    expect(lines.slice(0, 2)).toEqual(['j_1', 'j_2']);
    expect(lines.slice(2).map((l) => l.replace(/^\d\d:\d\d:\d\d /, ''))).toEqual([
      '2 jobs  2 queued',
      '2 jobs  1 queued  1 running',
      '2 jobs  1 running  1 succeeded',
      '2 jobs  2 succeeded',
    ]);
    expect(stdout()).not.toMatch(/\u001b/);
  });

  it('--watch --json prints NDJSON counts, then the final list', async () => {
    const gantry = await fakeGantry({ states: { j_1: ['queued', 'succeeded'], j_2: ['canceled'] } });
    const { io, stdout } = captureIo();
    expect(await runSubmit(LIST, { server: gantry.url, watch: true, json: true, interval: 5 }, io)).toBe(ExitCode.canceled);
    const lines = stdout()
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toEqual([
      { total: 2, states: { queued: 1, canceled: 1 } },
      { total: 2, states: { succeeded: 1, canceled: 1 } },
      [
        { id: 'j_1', name: 'a', state: 'succeeded', failureReason: null },
        { id: 'j_2', name: 'b', state: 'canceled', failureReason: null },
      ],
    ]);
  });

  it('Ctrl-C while waiting stops watching with 130 and leaves the jobs alone', async () => {
    const gantry = await fakeGantry({ states: { j_1: ['running'], j_2: ['running'] } });
    const controller = new AbortController();
    const { io, stderr } = captureIo({ signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    expect(await runSubmit(LIST, { server: gantry.url, wait: true, interval: 5 }, io)).toBe(ExitCode.interrupted);
    expect(stderr()).toContain('stopped watching 2 jobs; they keep running');
  });
});
