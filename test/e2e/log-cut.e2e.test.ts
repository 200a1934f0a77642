import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { EventView } from '../../src/api/contract/job-view.js';
import { api, gantry, gantryUpForSuite, isTerminal, until } from '../support/gantry-process.js';

/**
 * Logs keep both ends (issue 28): a stage that prints past the head's cap keeps its first part and
 * its last lines (where a failing run's error is), a line marks the cut where it was, `status`, the
 * events and the attempt's view say so, and the agent deletes its copy once the server has what it
 * keeps. Small caps (GANTRY_LOG_HEAD_BYTES, GANTRY_LOG_TAIL_BYTES) keep it fast.
 */
describe('a log past its cap', () => {
  const up = gantryUpForSuite({
    cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n',
    machines: 1,
    env: { GANTRY_LOG_HEAD_BYTES: '64Ki', GANTRY_LOG_TAIL_BYTES: '16Ki' },
  });

  it('keeps the head, the cut marked, and the last lines; status, events and the view say so; the agent keeps no copy', async () => {
    // "line 1\n" … "line 60000\n": 648,894 bytes of stdout, then the error, on stderr, and a failure.
    const lines = 60_000;
    const stdoutBytes = Array.from({ length: lines }, (_, i) => `line ${i + 1}\n`).reduce((n, l) => n + l.length, 0);
    const r = await api(up().url, '/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'loud',
        stages: [
          {
            name: 's',
            retry: { maxAttempts: 1 },
            command: ['sh', '-c', `echo kept > work.txt; seq 1 ${lines} | sed 's/^/line /'; echo 'error: the real cause' >&2; exit 3`],
          },
        ],
      }),
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const id = r.body.id as string;
    const job = await until(
      'the job ends',
      () => api(up().url, `/v1/jobs/${id}`).then((x) => x.body),
      (j) => isTerminal(j),
      60_000,
    );
    expect(job.state).toBe('failed');
    const attempt = job.stages[0].attempts[0];

    // The stored log: the head, the line where the cut is, and the end, the error included.
    const log = String((await api(up().url, `/v1/jobs/${id}/stages/s/logs`)).body);
    expect(log.startsWith('line 1\nline 2\n')).toBe(true);
    const marker = /\n\[gantry: ([\d.]+) KiB of stdout cut here \(its bytes (\d+) to (\d+)\); the head above and the tail below are kept\]\n/.exec(log);
    expect(marker, log.slice(0, 200)).not.toBeNull();
    const [from, to] = [Number(marker![2]), Number(marker![3])];
    expect(from).toBeGreaterThanOrEqual(64 * 1024);
    // What follows the cut is the stream's end: the last 16 KiB (less what stderr's tail took).
    expect(to).toBe(stdoutBytes - (16 * 1024 - 'error: the real cause\n'.length));
    expect(log.endsWith(`line ${lines}\nerror: the real cause\n`)).toBe(true);
    expect(Buffer.byteLength(log)).toBeLessThan(stdoutBytes - (to - from) + 1024);
    // The head is what the file held up to the cut, byte for byte.
    const head = log.slice(0, log.indexOf(marker![0]));
    expect(Buffer.byteLength(head)).toBe(from);

    // The view and the events say it was cut, and by how much.
    expect(attempt.logCutBytes).toBe(to - from);
    const events = (await api(up().url, `/v1/jobs/${id}/events`)).body.events as EventView[];
    const cut = events.filter((e) => e.type === 'attempt:log-cut');
    // (The events' data, {stream, fromByte, toByte, bytes} and the end's logCutBytes, is the store's: its conformance suite checks it.)
    expect(cut.map((e) => [e.attemptId, e.message])).toEqual([
      [attempt.id, `stage s attempt 1 log cut: ${((to - from) / 1024).toFixed(1)} KiB of stdout dropped between its head and its end; the tail follows`],
    ]);

    // `gantry status` says it in the attempt's detail; `gantry logs` prints what is kept, the end included.
    const status = await gantry(['status', id, '--server', up().url]);
    expect(status.stdout).toMatch(new RegExp(`log cut: ${((to - from) / 1024).toFixed(1)} KiB dropped`));
    const logs = await gantry(['logs', id, 's', '--server', up().url]);
    expect(logs.stdout).toBe(log);

    // The agent's copy is gone once its outcome is settled; its directory stays (its work/ holds a file).
    const dir = join(up().dataDir, 'agents', 'cpu-1', 'attempts', attempt.id);
    await until(
      "the agent's log files removed",
      async () => readdirSync(dir),
      (names) => !names.includes('stdout.log') && !names.includes('stderr.log'),
    );
    expect(readdirSync(join(dir, 'work'))).toEqual(['work.txt']);
  }, 90_000);
});
