import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { LogChunkView } from '../../src/api/contract/job-view.js';
import { followSse } from '../../src/cli/client/sse-stream.js';
import { api, CLI, gantry, gantryUpForSuite, REPO, until } from '../support/gantry-process.js';

/**
 * `gantry logs` as a user meets it (issue 11): --follow of a canceled stage ends only when its
 * process is gone and its log whole (the lines it writes in its kill grace included); the log of
 * a stage that never ran, or of an attempt it never had, is a 404 the CLI names (exit 4).
 */
describe('gantry logs', () => {
  const up = gantryUpForSuite({ cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n', machines: 1, env: { GANTRY_KILL_GRACE_MS: '3000' } });
  const submit = (spec: unknown) =>
    api(up().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) }).then((r) => r.body.id as string);

  it('--follow of a canceled stage prints what it wrote in its kill grace, then ends', async () => {
    const id = await submit({
      name: 'graceful',
      stages: [{ name: 's', command: ['sh', '-c', "trap 'sleep 1; echo cleaned up; exit 0' TERM; echo started; while true; do sleep 0.1; done"] }],
    });
    // Its process has printed (an attempt acknowledged is not yet a process: on a loaded machine the
    // spawn can come after a cancel sent a second later, and then nothing is printed at all).
    await until(
      'printing',
      () => api(up().url, `/v1/jobs/${id}/stages/s/logs`),
      (r) => r.status === 200 && String(r.body).includes('started'),
      30_000,
    );
    const follow = gantry(['logs', id, 's', '--follow', '--server', up().url]);
    await new Promise((r) => setTimeout(r, 1000));
    await api(up().url, `/v1/jobs/${id}/cancel`, { method: 'POST' });
    const r = await follow;
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('started');
    expect(r.stdout).toContain('cleaned up');
  }, 40_000);

  it('the log stream: cut off after a chunk and resumed with Last-Event-ID, it sends the rest once, then its end', async () => {
    const id = await submit({ name: 'streamed', stages: [{ name: 's', command: ['sh', '-c', 'for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done'] }] });
    const url = `${up().url}/v1/jobs/${id}/stages/s/logs?follow=1`;
    const headers = { authorization: `Bearer ${up().token}` };
    const got: LogChunkView[] = [];
    let end: unknown = null;
    // The stage has not started yet: the stream waits for it. One chunk, then the connection is dropped.
    await followSse({
      url,
      headers,
      signal: new AbortController().signal,
      onMessage: (m) => (m.event === 'chunk' ? (got.push(JSON.parse(m.data) as LogChunkView), false) : undefined),
    });
    expect(got).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 800));
    await followSse({
      url,
      headers,
      lastEventId: String(got[0]!.id),
      signal: new AbortController().signal,
      onMessage: (m) => {
        if (m.event === 'end') {
          end = JSON.parse(m.data);
          return false;
        }
        got.push(JSON.parse(m.data) as LogChunkView);
      },
    });
    expect(end).toEqual({ attempt: 1, state: 'succeeded' });
    const ids = got.map((c) => c.id);
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
    expect(got.map((c) => c.data).join('')).toBe('line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n');
    expect((await api(up().url, `/v1/jobs/${id}/stages/s/logs`)).body).toBe(got.map((c) => c.data).join(''));
  }, 40_000);

  it('--follow of a stage that has not started waits for it, prints its log and ends with it', async () => {
    const id = await submit({
      name: 'later',
      stages: [
        { name: 'a', command: ['sleep', '1'] },
        { name: 'b', needs: ['a'], command: ['sh', '-c', 'echo from b; echo to stderr >&2'] },
      ],
    });
    const r = await gantry(['logs', id, 'b', '--follow', '--server', up().url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('from b\nto stderr\n');
    expect(r.stderr).toBe('');
  }, 40_000);

  it('the log of a stage that never ran, or of an attempt it never had: exit 4, saying which', async () => {
    const id = await submit({
      name: 'never',
      stages: [
        { name: 'a', command: ['sleep', '30'] },
        { name: 'b', needs: ['a'], command: ['true'] },
      ],
    });
    const never = await gantry(['logs', id, 'b', '--server', up().url]);
    expect(never.code).toBe(4);
    expect(never.stderr).toContain('stage b of job');
    expect(never.stderr).toContain('has not run yet (it is pending)');
    await until(
      'a running',
      () => api(up().url, `/v1/jobs/${id}`),
      (r) => r.body.stages[0].attempts.length === 1,
      20_000,
    );
    const missing = await gantry(['logs', id, 'a', '--attempt', '3', '--server', up().url]);
    expect(missing.code).toBe(4);
    expect(missing.stderr).toContain('has no attempt 3: its attempts are 1');
    await api(up().url, `/v1/jobs/${id}/cancel`, { method: 'POST' });
  }, 40_000);

  it('--watch in a terminal that reports 0×0 falls back to one line per change', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'tiny-tty-')), 'job.yaml');
    writeFileSync(file, 'name: tiny-tty\nstages:\n  - { name: s, command: ["sleep", "0.5"] }\n');
    // `script` gives the CLI a terminal; stty sets its size to 0×0 first.
    const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const p = spawn('script', ['-qec', `stty rows 0 cols 0; ${process.execPath} ${CLI} submit ${file} --watch --server ${up().url}`, '/dev/null'], {
        cwd: REPO,
        env: { ...process.env, NO_COLOR: '1', GANTRY_TOKEN: up().token },
      });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.on('close', (code) => resolve({ code, out }));
    });
    expect(r.code).toBe(0);
    // The line view: the stage's state changes as lines, not redrawn in place (no cursor-up codes).
    expect(r.out).not.toContain('\u001b[1A');
    expect(r.out).toContain('succeeded');
  }, 40_000);
});
