import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, gantry, type RunningGantry, startGantryUp } from '../support/gantry-process.js';

describe('gantry submit of many jobs, end to end', () => {
  let g: RunningGantry;
  beforeAll(async () => {
    g = await startGantryUp();
  });
  afterAll(async () => {
    await g?.stop();
  });

  it('a sweep runs as one job per combination; --wait exits 1 when any failed', async () => {
    const file = join(g.dataDir, 'sweep.yaml');
    writeFileSync(
      file,
      [
        'name: sweep',
        'sweep: { tag: [a, b], code: [0, 7] }',
        'retry: { maxAttempts: 1 }',
        'stages:',
        '  - name: run',
        '    resources: { cpu: 0.1, memory: 16Mi }',
        '    env: { TAG: "${sweep.tag}" }',
        '    command: [sh, -c, "echo tag=$TAG arg=${sweep.tag}; exit ${sweep.code}"]',
        '',
      ].join('\n'),
    );
    const r = await gantry(['submit', file, '--wait', '--server', g.url]);
    expect(r.code, r.stderr).toBe(1);
    const ids = r.stdout.trim().split('\n');
    expect(ids).toHaveLength(4);
    expect(r.stderr).toContain('4 jobs: 2 succeeded, 2 failed');
    const jobs = await Promise.all(ids.map(async (id) => (await api(g.url, `/v1/jobs/${id}`)).body));
    expect(jobs.map((j) => [j.name, j.state])).toEqual([
      ['sweep-tag_a-code_0', 'succeeded'],
      ['sweep-tag_a-code_7', 'failed'],
      ['sweep-tag_b-code_0', 'succeeded'],
      ['sweep-tag_b-code_7', 'failed'],
    ]);
    const log = await api(g.url, `/v1/jobs/${ids[2]}/stages/run/logs`);
    expect(log.body).toContain('tag=b arg=b');
  });

  it('--- separated specs go as one batch; --wait exits 0 when all succeeded', async () => {
    const file = join(g.dataDir, 'docs.yaml');
    const doc = (name: string) =>
      `name: ${name}\nstages:\n  - { name: a, resources: { cpu: 0.1, memory: 16Mi }, command: ["true"] }\n  - { name: b, needs: [a], resources: { cpu: 0.1, memory: 16Mi }, command: ["true"] }\n`;
    writeFileSync(file, `${doc('one')}---\n${doc('two')}`);
    const r = await gantry(['submit', file, '--wait', '--json', '--server', g.url]);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { name: string; state: string }[];
    expect(out.map((j) => [j.name, j.state])).toEqual([
      ['one', 'succeeded'],
      ['two', 'succeeded'],
    ]);
  });
});
