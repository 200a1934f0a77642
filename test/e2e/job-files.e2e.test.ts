import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { api, gantry, gantryUpForSuite, until } from '../support/gantry-process.js';

/** `gantry outputs`, `gantry delete` and `gantry list --before` as a user runs them (issue 11). */
describe('outputs, delete, list paging', () => {
  const up = gantryUpForSuite({ cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n', machines: 1 });
  const submit = (spec: unknown) =>
    api(up().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) }).then((r) => r.body.id as string);
  const cli = (...args: string[]) => gantry([...args, '--server', up().url]);
  const ended = (id: string) =>
    until(
      'ended',
      () => api(up().url, `/v1/jobs/${id}`),
      (r) => ['succeeded', 'failed', 'canceled'].includes(r.body.state),
      30_000,
    );

  it("lists, prints and downloads a stage's committed outputs, bytes as they are", async () => {
    const id = await submit({
      name: 'files',
      stages: [
        {
          name: 'make',
          command: [
            'sh',
            '-c',
            'printf hello > "$GANTRY_OUTPUT_DIR/a.txt"; mkdir -p "$GANTRY_OUTPUT_DIR/sub"; printf "\\000\\377\\020" > "$GANTRY_OUTPUT_DIR/sub/b.bin"',
          ],
        },
      ],
    });
    await ended(id);
    const list = await cli('outputs', id, 'make');
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/5\s+a\.txt/);
    expect(list.stdout).toMatch(/3\s+sub\/b\.bin/);
    const one = await cli('outputs', id, 'make', 'a.txt');
    expect(one.stdout).toBe('hello');
    const dir = mkdtempSync(join(tmpdir(), 'outputs-'));
    expect((await cli('outputs', id, 'make', '-o', dir)).code).toBe(0);
    expect(readFileSync(join(dir, 'a.txt'), 'utf8')).toBe('hello');
    expect([...readFileSync(join(dir, 'sub/b.bin'))]).toEqual([0, 255, 16]);
    const missing = await cli('outputs', id, 'make', 'nope.txt');
    expect(missing.code).toBe(4);
    expect(missing.stderr).toContain('has no output nope.txt (it has: a.txt, sub/b.bin)');
  }, 40_000);

  it('deletes an ended job and everything of it; refuses one still running', async () => {
    const running = await submit({ name: 'busy', stages: [{ name: 's', command: ['sleep', '30'] }] });
    const refused = await cli('delete', running);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('only an ended job can be deleted');
    await cli('cancel', running);
    await ended(running);
    await until(
      'released',
      () => api(up().url, `/v1/jobs/${running}`),
      (r) => r.body.stages[0].attempts[0]?.releasedAt != null,
      20_000,
    );
    const gone = await cli('delete', running);
    expect(gone.code).toBe(0);
    expect(gone.stdout).toContain(`deleted ${running} (1 attempt`);
    expect((await cli('status', running)).code).toBe(4);
    expect((await api(up().url, `/v1/jobs/${running}/events`)).status).toBe(404);
  }, 60_000);

  it('pages the list with --before, newest first, nothing twice', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await submit({ name: `page-${i}`, stages: [{ name: 's', command: ['true'] }] }));
    const first = JSON.parse((await cli('list', '--limit', '2', '--json')).stdout).jobs.map((j: { id: string }) => j.id);
    const second = JSON.parse((await cli('list', '--limit', '2', '--before', first[1], '--json')).stdout).jobs.map((j: { id: string }) => j.id);
    expect(first).toEqual([ids[4], ids[3]]);
    expect(second).toEqual([ids[2], ids[1]]);
    expect((await cli('list', '--before', 'job_nope')).code).toBe(4);
  }, 40_000);
});
