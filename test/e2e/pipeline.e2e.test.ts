import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, isTerminal, jobOf, processGroupAlive, type RunningGantry, startGantryUp, submit, until } from '../support/gantry-process.js';

const CLUSTER = `
machines:
  - { name: cpu-1, cpu: 4, memory: 8Gi }
  - { name: cpu-2, cpu: 4, memory: 8Gi }
  - { name: gpu-1, cpu: 16, memory: 64Gi, gpus: { type: h100, count: 4 }, region: us-east, labels: { nvlink: "true" } }
  - { name: gpu-2, cpu: 8, memory: 32Gi, gpus: { type: a100, count: 2 } }
`;

const sh = (script: string) => ['sh', '-c', script];

describe('gantry up, end to end', () => {
  let g: RunningGantry;
  beforeAll(async () => {
    g = await startGantryUp({ cluster: CLUSTER, env: { GANTRY_KILL_GRACE_MS: '2000' } });
    await until(
      'four machines',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines?.length === 4,
    );
  });
  afterAll(async () => {
    await g?.stop();
  });

  it('runs a DAG with fan-out and fan-in across CPU and GPU machines, handing outputs on', async () => {
    const gpuStage = (name: string, gpu: object, extra: object = {}) => ({
      name,
      needs: ['prep'],
      resources: { cpu: 2, memory: '1Gi', gpu },
      command: sh(
        `set -e; cat "$GANTRY_INPUT_DIR/prep/data.txt" > "$GANTRY_OUTPUT_DIR/seen.txt"; echo "$CUDA_VISIBLE_DEVICES" > "$GANTRY_OUTPUT_DIR/devices.txt"; sleep 1`,
      ),
      ...extra,
    });
    const spec = {
      name: 'fan-out-fan-in',
      stages: [
        { name: 'prep', resources: { cpu: 1, memory: '256Mi' }, command: sh('echo "rows=42" > "$GANTRY_OUTPUT_DIR/data.txt"; echo prepared') },
        gpuStage('train-h100', { count: 2, type: 'h100' }, { placement: { region: 'us-east', labels: { nvlink: 'true' } } }),
        gpuStage('train-h100-b', { count: 2, type: 'h100' }),
        gpuStage('train-a100', { count: 1, type: ['a100'] }),
        {
          name: 'features',
          needs: ['prep'],
          resources: { cpu: 1, memory: '256Mi' },
          command: sh('echo "cuda=[$CUDA_VISIBLE_DEVICES]" > "$GANTRY_OUTPUT_DIR/features.txt"'),
        },
        {
          name: 'merge',
          needs: ['train-h100', 'train-h100-b', 'train-a100', 'features'],
          resources: { cpu: 1, memory: '256Mi' },
          command: sh(
            'set -e; for s in train-h100 train-h100-b train-a100; do printf "%s %s %s\\n" "$s" "$(cat $GANTRY_INPUT_DIR/$s/seen.txt)" "$(cat $GANTRY_INPUT_DIR/$s/devices.txt)"; done > "$GANTRY_OUTPUT_DIR/result.txt"; cat "$GANTRY_INPUT_DIR/features/features.txt" >> "$GANTRY_OUTPUT_DIR/result.txt"',
          ),
        },
      ],
    };
    const r = await submit(g.url, spec);
    expect(r.status).toBe(201);
    const job = await until('job ends', () => jobOf(g.url, r.body.id), isTerminal, 60_000);
    expect(job.state, JSON.stringify(job, null, 1)).toBe('succeeded');

    const st = (n: string) => job.stages.find((s: any) => s.name === n);
    const last = (n: string) => st(n).attempts.at(-1);
    // Each stage ran on a machine of the right kind.
    for (const n of ['prep', 'features', 'merge']) expect(last(n).machine).toMatch(/^cpu-/);
    expect(last('train-h100').machine).toBe('gpu-1');
    expect(last('train-h100-b').machine).toBe('gpu-1');
    expect(last('train-a100').machine).toBe('gpu-2');
    expect(last('features').gpus).toEqual([]);
    // The two h100 stages overlapped on gpu-1 and got distinct devices.
    const a = last('train-h100').gpus as number[];
    const b = last('train-h100-b').gpus as number[];
    expect(a).toHaveLength(2);
    expect(b).toHaveLength(2);
    expect(new Set([...a, ...b]).size).toBe(4);

    // Outputs flowed: merge read every upstream stage's committed files.
    const out = await api(g.url, `/v1/jobs/${job.id}/stages/merge/outputs/result.txt`);
    expect(out.status).toBe(200);
    const lines = String(out.body).trim().split('\n');
    expect(lines[0]).toBe(`train-h100 rows=42 ${a.join(',')}`);
    expect(lines[1]).toBe(`train-h100-b rows=42 ${b.join(',')}`);
    expect(lines[2]).toBe(`train-a100 rows=42 ${last('train-a100').gpus.join(',')}`);
    expect(lines[3]).toBe('cuda=[]');
    const logs = await api(g.url, `/v1/jobs/${job.id}/stages/prep/logs`);
    expect(logs.body).toContain('prepared');
  });

  it('retries a failing stage, then fails the job and skips its dependents', async () => {
    const r = await submit(g.url, {
      name: 'fails',
      retry: { maxAttempts: 2, backoff: { initialSeconds: 1, maxSeconds: 1 } },
      stages: [
        { name: 'bad', resources: { cpu: 1, memory: '64Mi' }, command: sh('echo "attempt $GANTRY_ATTEMPT failing" >&2; exit 7') },
        { name: 'after', needs: ['bad'], command: ['true'] },
      ],
    });
    expect(r.status).toBe(201);
    const job = await until('job ends', () => jobOf(g.url, r.body.id), isTerminal, 60_000);
    expect(job.state).toBe('failed');
    const bad = job.stages.find((s: any) => s.name === 'bad');
    expect(bad.state).toBe('failed');
    expect(bad.attempts.map((a: any) => [a.number, a.state, a.exitCode])).toEqual([
      [1, 'failed', 7],
      [2, 'failed', 7],
    ]);
    expect(job.stages.find((s: any) => s.name === 'after').state).toBe('skipped');
    expect(job.failureReason).toMatch(/bad failed: exit code 7/);
    const logs = await api(g.url, `/v1/jobs/${job.id}/stages/bad/logs?attempt=2`);
    expect(logs.body).toContain('attempt 2 failing');
  });

  it("a failed job's reason names the stage whose failure failed it, not one that failed after it", async () => {
    // `slow` is first by position and fails last (its timeout, while the job is already failing).
    const r = await submit(g.url, {
      name: 'first-failure',
      retry: { maxAttempts: 3, onExitCodes: [75] },
      stages: [
        { name: 'slow', resources: { cpu: 1, memory: '64Mi' }, timeoutSeconds: 3, command: sh('sleep 30') },
        { name: 'exit5', resources: { cpu: 1, memory: '64Mi' }, command: sh('sleep 0.5; exit 5') },
      ],
    });
    expect(r.status).toBe(201);
    const job = await until('job ends', () => jobOf(g.url, r.body.id), isTerminal, 60_000);
    expect(job.state).toBe('failed');
    const reasons = Object.fromEntries(job.stages.map((s: any) => [s.name, s.endReason]));
    expect(reasons.exit5).toBe('exit code 5; not retryable');
    expect(reasons.slow).toMatch(/not retried because the job is failing$/);
    expect(job.failureReason).toBe('stage exit5 failed: exit code 5; not retryable');
  });

  it('cancel kills the whole process group of a sleeping stage within the grace period', async () => {
    const r = await submit(g.url, {
      name: 'sleeper',
      stages: [{ name: 'nap', resources: { cpu: 1, memory: '64Mi' }, command: sh('sleep 300 & sleep 300 & wait') }],
    });
    const running = await until(
      'stage running with a pid',
      () => jobOf(g.url, r.body.id),
      (j) => j.stages[0].attempts[0]?.state === 'running' && j.stages[0].attempts[0]?.pid,
    );
    const pid = running.stages[0].attempts[0].pid as number;
    expect(processGroupAlive(pid)).toBe(true);
    const c = await api(g.url, `/v1/jobs/${r.body.id}/cancel`, { method: 'POST' });
    expect(c.status).toBe(200);
    expect(c.body.job.state).toBe('canceled');
    const t0 = Date.now();
    await until(
      'process group gone',
      async () => processGroupAlive(pid),
      (alive) => !alive,
      2000 + 3000,
    );
    // Within the grace period (2 s) plus the time to hear about the cancel.
    expect(Date.now() - t0).toBeLessThan(2000 + 3000);
  });

  it('refuses a bad spec with 400 naming the problem, and writes nothing', async () => {
    const before = (await api(g.url, '/v1/jobs?limit=1000')).body.jobs.length;
    const r = await submit(g.url, {
      name: 'cyclic',
      stages: [
        { name: 'a', needs: ['b'], command: ['true'] },
        { name: 'b', needs: ['a'], command: ['true'] },
      ],
    });
    expect(r.status).toBe(400);
    expect(r.body.message).toMatch(/cycle: a -> b -> a|cycle: b -> a -> b/);
    const big = await api(g.url, '/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'x', pad: 'y'.repeat(1.2 * 2 ** 20) }),
    });
    expect(big.status).toBe(413);
    expect((await api(g.url, '/v1/jobs?limit=1000')).body.jobs.length).toBe(before);
  });
});
