import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { api, gantry, gantryUpForSuite, until } from '../support/gantry-process.js';

/**
 * Output limits as a stage meets them (issue 28, attack item 3; docs/security.md, "Output
 * limits"): the agent counts each file by its length, so a sparse file that holds no block on its
 * disk counts as what the server would have to store; over the limits it uploads nothing and
 * ends the attempt outputs-failed saying what is over.
 */
describe('output limits', () => {
  // The server's default for a stage that asks nothing, from its environment.
  const up = gantryUpForSuite({
    cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n',
    machines: 1,
    env: { GANTRY_OUTPUTS_DEFAULT_BYTES: '256Mi' },
  });
  const once = { maxAttempts: 1 };
  const submit = (spec: unknown) =>
    api(up().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) }).then((r) => {
      expect(r.status).toBe(201);
      return r.body.id as string;
    });
  const ended = (id: string) =>
    until(
      'ended',
      () => api(up().url, `/v1/jobs/${id}`),
      (r) => ['succeeded', 'failed', 'canceled'].includes(r.body.state),
      30_000,
    );
  const blobs = () => {
    const top = join(up().dataDir, 'artifacts', 'blobs', 'sha256');
    return existsSync(top) ? readdirSync(top).flatMap((d) => readdirSync(join(top, d))) : [];
  };

  it("a sparse 1 GiB file (truncate -s 1G) is over the server's default of 256 MiB: outputs-failed with the reason, nothing uploaded", async () => {
    const before = blobs();
    const id = await submit({
      name: 'sparse',
      retry: once,
      stages: [{ name: 'make', command: ['sh', '-c', 'truncate -s 1G "$GANTRY_OUTPUT_DIR/big.bin" && printf x > "$GANTRY_OUTPUT_DIR/small.txt"'] }],
    });
    const job = (await ended(id)).body;
    expect(job.state).toBe('failed');
    const attempt = job.stages[0].attempts[0];
    expect(attempt.endKind).toBe('outputs-failed');
    expect(attempt.reason).toBe(
      "outputs 1.0 GiB over the stage's limit of 256 MiB (big.bin 1 GiB, small.txt 1 byte); nothing was uploaded (limits.outputs.bytes) (the process exited 0)",
    );
    // Neither file reached the server: not the small one before the big one, nothing on its disk.
    expect(attempt.outputs ?? []).toEqual([]);
    expect(job.stages[0].outputs ?? null).toBeNull();
    expect(blobs()).toEqual(before);
  }, 60_000);

  it("more files than the stage's limits.outputs.files: outputs-failed, nothing uploaded; within its limits a stage succeeds", async () => {
    const before = blobs();
    const id = await submit({
      name: 'many',
      retry: once,
      stages: [
        {
          name: 'make',
          limits: { outputs: { files: 3 } },
          command: ['sh', '-c', 'for i in 1 2 3 4 5; do printf $i > "$GANTRY_OUTPUT_DIR/f$i"; done'],
        },
      ],
    });
    const job = (await ended(id)).body;
    expect(job.stages[0].attempts[0]).toMatchObject({
      endKind: 'outputs-failed',
      reason: "outputs: 5 files, over the stage's limit of 3 files (limits.outputs.files) (the process exited 0)",
    });
    expect(blobs()).toEqual(before);
    const ok = await submit({
      name: 'fits',
      retry: once,
      stages: [{ name: 'make', limits: { outputs: { bytes: '1Ki', files: 2 } }, command: ['sh', '-c', 'printf hello > "$GANTRY_OUTPUT_DIR/a.txt"'] }],
    });
    expect((await ended(ok)).body.state).toBe('succeeded');
  }, 60_000);

  it("a team's own bound (gantry team set --quota outputs=Q), which the agent does not know: the server refuses the upload, the attempt ends outputs-failed", async () => {
    const made = await gantry(['team', 'create', 'tiny', '--quota', 'outputs=1Ki', '--server', up().url]);
    expect(made.code, made.stderr).toBe(0);
    expect(made.stdout).toBe('team tiny created: weight 1, quota outputs=1Ki\n');
    const before = blobs();
    const id = await submit({
      name: 'over-team',
      team: 'tiny',
      retry: once,
      stages: [{ name: 'make', command: ['sh', '-c', 'head -c 2048 /dev/zero > "$GANTRY_OUTPUT_DIR/two.bin"'] }],
    });
    const attempt = (await ended(id)).body.stages[0].attempts[0];
    expect(attempt.endKind).toBe('outputs-failed');
    expect(attempt.reason).toMatch(
      /^output upload failed: PUT \/v1\/agent\/attempts\/\S+\/outputs\/two\.bin: 413 outputs_too_large: output two\.bin \(2 KiB\) is over team tiny's limit of 1 KiB of stored outputs \(0 bytes committed\): nothing of it was kept \(the process exited 0\)$/,
    );
    expect(blobs()).toEqual(before);
  }, 60_000);
});
