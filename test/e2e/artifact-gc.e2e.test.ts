import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { api, gantry, gantryUpForSuite, jobOf, startGantryUp, until, sharedDir } from '../support/gantry-process.js';

const CLUSTER = 'machines:\n  - { name: cpu-1, cpu: 4, memory: 4Gi }\n';

/** A stage writing `bytes` bytes of `char` into out.bin (then failing with `exit`). */
const writes = (name: string, char: string, bytes: number, extra: Record<string, unknown> = {}) => ({
  name,
  resources: { cpu: 0.5, memory: '128Mi' },
  retry: { maxAttempts: 1 },
  command: ['sh', '-c', `head -c ${bytes} /dev/zero | tr '\\0' ${char} > "$GANTRY_OUTPUT_DIR/out.bin"`],
  ...extra,
});
const fails = (name: string, needs: string[]) => ({ name, needs, resources: { cpu: 0.5, memory: '128Mi' }, retry: { maxAttempts: 1 }, command: ['false'] });

/** Outputs kept by reference, the size budget and gantry gc (issue 12), with the built CLI. */
describe('artifact collection and the size budget', () => {
  // 3000 bytes; collection only when asked (its timer is an hour), sparing nothing for freshness.
  const up = gantryUpForSuite({
    cluster: CLUSTER,
    machines: 1,
    env: { GANTRY_ARTIFACTS_MAX_BYTES: '3000', GANTRY_ARTIFACTS_GC_SECONDS: '3600', GANTRY_ARTIFACTS_GRACE_SECONDS: '0' },
  });
  const cli = (...args: string[]) => gantry([...args, '--server', up().url]);
  const dir = sharedDir('gc-e2e-');
  const submit = async (name: string, spec: unknown) => {
    writeFileSync(join(dir, name), stringify(spec));
    return (await cli('submit', join(dir, name), '--wait')).stdout.trim();
  };

  it("releases ended jobs' outputs oldest first past the budget, never what a rerun reuses; delete keeps reused outputs", async () => {
    const a = await submit('a.yaml', { name: 'a', stages: [writes('s1', 'a', 2000), fails('s2', ['s1'])] });
    writeFileSync(join(dir, 'a-fixed.yaml'), stringify({ name: 'a', stages: [writes('s1', 'a', 2000), { ...writes('s2', 'b', 500), needs: ['s1'] }] }));
    const b = (await cli('rerun', a, '--spec', join(dir, 'a-fixed.yaml'), '--wait')).stdout.trim();
    expect((await jobOf(up().url, b)).state).toBe('succeeded');
    const c = await submit('c.yaml', { name: 'c', stages: [writes('s', 'c', 1500)] });

    // 4000 bytes against 3000: a's s1 is reused by b (kept); b's s2 and then c's s go, oldest first.
    const dry = await cli('gc', '--dry-run', '--json');
    const plan = JSON.parse(dry.stdout);
    expect(plan).toMatchObject({ dryRun: true, totalBytes: 4000, budgetBytes: 3000, bytesAfter: 2000 });
    expect(plan.release.map((r: { jobId: string; stage: string; bytes: number }) => [r.jobId, r.stage, r.bytes])).toEqual([
      [b, 's2', 500],
      [c, 's', 1500],
    ]);
    const text = await cli('gc', '--dry-run');
    expect(text.stdout).toContain('artifact store: 3.9 KiB in 3 files, budget 2.9 KiB');
    expect(text.stdout).toMatch(new RegExp(`release\\s+500 B\\s+${b}/s2`));
    expect(text.stdout).toContain('dry run: nothing was deleted');
    expect((await cli('outputs', c, 's')).code).toBe(0);

    const done = JSON.parse((await cli('gc', '--json')).stdout);
    expect(done).toMatchObject({ dryRun: false, deleted: 2, freedBytes: 2000, bytesAfter: 2000 });
    const released = await cli('outputs', c, 's', 'out.bin');
    expect(released.code).toBe(4);
    expect(released.stderr).toContain('released');
    expect((await cli('status', c)).stdout).toContain('outputs released: the artifact store was over its size budget');
    // What a rerun reuses stays, under both jobs.
    expect((await cli('outputs', b, 's1', 'out.bin')).stdout).toBe('a'.repeat(2000));
    expect((await cli('outputs', a, 's1', 'out.bin')).stdout).toBe('a'.repeat(2000));

    // Deleting the original keeps the outputs its rerun reuses.
    expect((await cli('delete', a)).code).toBe(0);
    const after = JSON.parse((await cli('gc', '--json')).stdout);
    expect(after).toMatchObject({ deleted: 0, totalBytes: 2000 });
    expect((await cli('outputs', b, 's1', 'out.bin')).stdout).toBe('a'.repeat(2000));

    // Past the budget again: b is now the only job naming s1's outputs, and it has ended, so they go
    // first (oldest), then d's. Outputs the budget released cannot be reused: the rerun says which
    // stage, and what to do.
    const d = await submit('d.yaml', { name: 'd', stages: [writes('d1', 'd', 3500), fails('d2', ['d1'])] });
    const over = JSON.parse((await cli('gc', '--json')).stdout) as { release: { jobId: string; stage: string }[]; bytesAfter: number };
    expect(over.release.map((r) => `${r.jobId}/${r.stage}`)).toEqual([`${b}/s1`, `${d}/d1`]);
    expect(over.bytesAfter).toBe(0);
    const refused = await cli('rerun', d);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/stage d1's committed outputs in job \S+ are gone \(released .*size budget\), so it cannot be reused: .*--from d1/);
    expect((await cli('rerun', d, '--from', 'd1', '--dry-run')).code).toBe(0);
    // gc is an admin's.
    const team = JSON.parse((await cli('token', 'create', '--team', 'ml', '--name', 'gc-test', '--json')).stdout).token as string;
    const denied = await gantry(['gc', '--server', up().url, '--token', team]);
    expect(denied.code).toBe(6);
  }, 120_000);

  it('gc finds what a crash left: a file no job names is deleted, a named file left renamed aside is put back', async () => {
    const e = await submit('e.yaml', { name: 'e', stages: [writes('e1', 'e', 100)] });
    const blobs = join(up().dataDir, 'artifacts', 'blobs', 'sha256');
    const place = (text: string) => {
      const h = createHash('sha256').update(text).digest('hex');
      return join(blobs, h.slice(0, 2), h);
    };
    // A collection that died between renaming e's file aside and putting it back.
    const named = place('e'.repeat(100));
    renameSync(named, `${named}.gc-1-deadbeef`);
    // A collection that died between deleting a blob's row and its file (written an hour ago).
    const stray = place('left behind');
    mkdirSync(dirname(stray), { recursive: true });
    writeFileSync(stray, 'left behind');
    utimesSync(stray, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
    const r = await cli('gc');
    expect(r.stdout).toContain('left by a crash: 1 file no job refers to deleted, 1 put back, 0 set-aside copies removed');
    expect(existsSync(stray)).toBe(false);
    expect(existsSync(`${named}.gc-1-deadbeef`)).toBe(false);
    expect((await cli('outputs', e, 'e1', 'out.bin')).stdout).toBe('e'.repeat(100));
    // Nothing left over: a second pass finds nothing.
    expect(JSON.parse((await cli('gc', '--json')).stdout).strays).toEqual({ collected: 0, restored: 0, removedAside: 0 });
  }, 60_000);
});

/** Retention deletes ended jobs after GANTRY_RETENTION_HOURS; what a rerun still reuses stays. */
describe('retention keeps what a rerun reuses', () => {
  // About 7 s of retention; collection every second.
  const up = gantryUpForSuite({
    cluster: CLUSTER,
    machines: 1,
    env: { GANTRY_RETENTION_HOURS: '0.002', GANTRY_ARTIFACTS_GC_SECONDS: '1', GANTRY_ARTIFACTS_GRACE_SECONDS: '0' },
  });
  const cli = (...args: string[]) => gantry([...args, '--server', up().url]);

  it('the original is deleted after retention; its rerun still reads, downloads and reuses its outputs', async () => {
    const dir = sharedDir('retention-e2e-');
    const gate = join(dir, 'go');
    const spec = (s2: string[]) => ({
      name: 'kept',
      stages: [writes('s1', 'k', 300), { name: 's2', needs: ['s1'], retry: { maxAttempts: 1 }, resources: { cpu: 0.5, memory: '128Mi' }, command: s2 }],
    });
    writeFileSync(join(dir, 'job.yaml'), stringify(spec(['false'])));
    writeFileSync(
      join(dir, 'fixed.yaml'),
      stringify(spec(['sh', '-c', `while [ ! -f ${gate} ]; do sleep 0.2; done; cp "$GANTRY_INPUT_DIR/s1/out.bin" "$GANTRY_OUTPUT_DIR/copy.bin"`])),
    );
    const orig = (await cli('submit', join(dir, 'job.yaml'), '--wait')).stdout.trim();
    const rerun = (await cli('rerun', orig, '--spec', join(dir, 'fixed.yaml'))).stdout.trim();
    expect(rerun).toMatch(/^job_/);
    await until(
      'the original deleted by retention',
      () => api(up().url, `/v1/jobs/${orig}`),
      (r) => r.status === 404,
      60_000,
    );
    // Collections have run meanwhile: the reused file is still there.
    await new Promise((r) => setTimeout(r, 2500));
    expect((await cli('outputs', rerun, 's1', 'out.bin')).stdout).toBe('k'.repeat(300));
    writeFileSync(gate, '');
    await until(
      'the rerun done',
      () => jobOf(up().url, rerun),
      (j) => j.state === 'succeeded' || j.state === 'failed',
      60_000,
    );
    expect((await jobOf(up().url, rerun)).state).toBe('succeeded');
    expect((await cli('outputs', rerun, 's2', 'copy.bin')).stdout).toBe('k'.repeat(300));
    expect((await cli('status', rerun)).stdout).toContain(`rerun of: ${orig}`);
  }, 120_000);
});

/** A crash between a collection's commit and its file deletes leaves a file no row names: the next server finds it on its own. */
describe('files a crash left in the artifact store', () => {
  it('a server started over a file no row names deletes it at its first collection, and says so', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'strays-e2e-'));
    const h = createHash('sha256').update('left by a crash').digest('hex');
    const stray = join(dataDir, 'artifacts', 'blobs', 'sha256', h.slice(0, 2), h);
    mkdirSync(dirname(stray), { recursive: true });
    writeFileSync(stray, 'left by a crash');
    utimesSync(stray, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
    const g = await startGantryUp({ dataDir, cluster: CLUSTER, env: { GANTRY_ARTIFACTS_GC_SECONDS: '1', GANTRY_ARTIFACTS_GRACE_SECONDS: '0' } });
    try {
      await until(
        'the stray file deleted',
        async () => existsSync(stray),
        (there) => !there,
        30_000,
      );
      const log = () => readFileSync(join(dataDir, 'server.log'), 'utf8');
      await until(
        'the server log saying so',
        async () => log(),
        (text) => text.includes('a crash left behind') && text.includes('"collected":1'),
        10_000,
      );
    } finally {
      await g.stop();
    }
  }, 60_000);
});
