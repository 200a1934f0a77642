import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { api, gantry, gantryUpForSuite, sharedDir, until } from '../support/gantry-process.js';

/**
 * Shares of a GPU end to end (issue 29), with real agents as `gantry up` starts them: on a machine
 * with one GPU, two stages asking for half a GPU each run at the same time on that GPU and see the
 * same CUDA_VISIBLE_DEVICES (and, the agent running with --gpu-sharing mps, their share's MPS bound);
 * a stage asking for the whole GPU waits until both have ended.
 *
 * "At the same time" is proven, not timed: each half writes its environment to a file of its own
 * and then waits for the other's file, so neither can end unless both ran at once (placed one
 * after the other, the first would wait for a file that never comes, and time out). Both then wait
 * for a `go` file the test writes only once the whole-GPU stage has been seen waiting.
 */
describe('two halves of one GPU run at once; a whole GPU waits for both', () => {
  // The agent told MPS runs there (its stages need no daemon here: they do not use CUDA), so what
  // it gives a share's stage shows the assignment's share arrived: 50 % of the GPU's threads.
  const g = gantryUpForSuite({
    cluster: 'machines:\n  - { name: gpu-1, cpu: 4, memory: 8Gi, gpus: { type: h100, count: 1 } }\n',
    machines: 1,
    env: { GANTRY_GPU_SHARING: 'mps' },
  });
  const dir = sharedDir('gantry-shares-');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const post = async (body: unknown) => {
    const r = await api(g().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.id as string;
  };
  type Attempt = { machine: string; gpus: number[]; gpuShare?: { milli: number }; startedAt: number | null; finishedAt: number | null };
  type Stage = { state: string; pendingReason: string | null; attempts: Attempt[] };
  const stageOf = async (id: string) => (await api(g().url, `/v1/jobs/${id}`)).body.stages[0] as Stage;

  /** Writes its environment (through a temporary name, so the other never reads half a file), waits for the other's, then for `go`. */
  const half = (me: string, other: string) => ({
    name: 'infer',
    stages: [
      {
        name: 'infer',
        resources: { cpu: 0.5, memory: '128Mi', gpu: { count: 0.5, type: 'h100' } },
        timeoutSeconds: 60,
        command: [
          'sh',
          '-c',
          `env > "${dir}/${me}.tmp" && mv "${dir}/${me}.tmp" "${dir}/${me}.env"; ` +
            `while [ ! -e "${dir}/${other}.env" ]; do sleep 0.05; done; while [ ! -e "${dir}/go" ]; do sleep 0.05; done`,
        ],
      },
    ],
  });
  const envOf = (name: string, variable: string) => new RegExp(`^${variable}=(.*)$`, 'm').exec(readFileSync(join(dir, `${name}.env`), 'utf8'))?.[1];
  const cudaOf = (name: string) => envOf(name, 'CUDA_VISIBLE_DEVICES');

  it('two 0.5 stages share GPU 0 at once with one CUDA_VISIBLE_DEVICES; the whole-GPU stage starts after both end', async () => {
    const a = await post(half('a', 'b'));
    const b = await post(half('b', 'a'));
    // Each has written its file, and so each runs; neither has ended (both wait for `go`).
    await until(
      'both halves running',
      async () => [existsSync(join(dir, 'a.env')), existsSync(join(dir, 'b.env')), await stageOf(a), await stageOf(b)] as const,
      ([ea, eb, sa, sb]) => ea && eb && sa.state === 'running' && sb.state === 'running',
      30_000,
    );
    const [sa, sb] = [await stageOf(a), await stageOf(b)];
    for (const s of [sa, sb]) expect(s.attempts[0]).toMatchObject({ machine: 'gpu-1', gpus: [0], gpuShare: { milli: 500 } });
    expect(cudaOf('a')).toBeTruthy();
    expect(cudaOf('a')).toBe(cudaOf('b'));
    for (const half of ['a', 'b']) expect(envOf(half, 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')).toBe('50');
    // What `gantry status` says of where it runs.
    const status = await gantry(['status', a, '--server', g().url]);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain('0.5 of h100:0');

    // The machine shows its one GPU held to the full by two shares.
    const machine = (await api(g().url, '/v1/machines/gpu-1')).body;
    expect(machine.gpus[0]).toMatchObject({ busy: true, usedMilli: 1000 });
    expect(machine.allocated.gpuHeld).toEqual([{ index: 0, milli: 1000, memoryBytes: 0 }]);

    const whole = await post({
      name: 'train',
      stages: [{ name: 'train', resources: { cpu: 0.5, memory: '128Mi', gpu: { count: 1, type: 'h100' } }, command: ['sh', '-c', `env > "${dir}/whole.env"`] }],
    });
    // The scheduler has looked at it and said why it waits; it has not started.
    const waiting = await until(
      'whole GPU stage waiting with a reason',
      () => stageOf(whole),
      (s) => s.state === 'ready' && s.pendingReason !== null,
      30_000,
    );
    expect(waiting.attempts).toHaveLength(0);

    writeFileSync(join(dir, 'go'), '');
    const done = await until(
      'all three succeeded',
      async () => [await stageOf(a), await stageOf(b), await stageOf(whole)],
      (st) => st.every((s) => s.state === 'succeeded'),
      60_000,
    );
    const ends = done.slice(0, 2).map((s) => s.attempts[0]!.finishedAt!);
    const [wa] = done[2]!.attempts;
    expect(wa).toMatchObject({ machine: 'gpu-1', gpus: [0] });
    expect(wa!.gpuShare).toBeUndefined();
    expect(wa!.startedAt!).toBeGreaterThanOrEqual(Math.max(...ends));
    // The same GPU, whole: no share to bound.
    expect(cudaOf('whole')).toBe(cudaOf('a'));
    expect(envOf('whole', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')).toBeUndefined();
  }, 120_000);

  it('gantry submit refuses 1.5 GPUs with exit 2, naming the field and why', async () => {
    const file = join(dir, 'one-and-a-half.yaml');
    writeFileSync(file, 'name: too-much\nstages:\n  - name: a\n    resources: { gpu: { count: 1.5 } }\n    command: ["true"]\n');
    const r = await gantry(['submit', file, '--server', g().url]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('/stages/0/resources/gpu/count: 1.5 GPUs: a share is of one GPU only; use a whole number of GPUs, or a share below 1');
  });
});
