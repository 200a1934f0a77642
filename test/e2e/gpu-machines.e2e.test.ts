import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, type RunningGantry, startGantryUp, until } from '../support/gantry-process.js';

/**
 * No stranded GPUs (issue 10): a flood of CPU work on a cluster of one CPU machine and one GPU
 * machine must leave the GPU machine's CPUs to GPU work. When GPU stages arrive behind 200 CPU
 * stages, each starts as soon as a GPU is free, and no CPU stage runs on the GPU machine unless
 * it allows it (and then only outside its free GPUs' share).
 */
const CLUSTER = `
machines:
  - { name: cpu-1, cpu: 2, memory: 4Gi }
  - { name: gpu-1, cpu: 4, memory: 8Gi, gpus: { type: h100, count: 2 } }
`;

describe('GPU machines keep their CPUs for GPU work', () => {
  let g: RunningGantry;
  beforeAll(async () => {
    g = await startGantryUp({ cluster: CLUSTER });
    await until(
      'two machines',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines?.length === 2,
    );
  });
  afterAll(async () => {
    await g?.stop();
  });

  const post = (path: string, body: unknown) =>
    api(g.url, path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const attemptsOf = async (id: string) =>
    (await api(g.url, `/v1/jobs/${id}`)).body.stages as { name: string; state: string; attempts: { machine: string; startedAt: number | null }[] }[];

  it('200 CPU stages then GPU stages: the GPU stages start at once, the CPU flood stays off the GPU machine', async () => {
    const flood = await post('/v1/jobs', {
      name: 'cpu-flood',
      stages: Array.from({ length: 200 }, (_, i) => ({ name: `c${i}`, resources: { cpu: 0.5, memory: '64Mi' }, command: ['sleep', '0.2'] })),
    });
    expect(flood.status).toBe(201);
    // The flood is under way (the CPU machine full), then GPU work arrives behind it.
    await until(
      'flood running',
      () => attemptsOf(flood.body.id),
      (st) => st.filter((s) => s.state === 'running').length >= 4,
    );
    const submittedAt = Date.now();
    const gpuJobs = [];
    for (const n of [1, 2]) {
      const r = await post('/v1/jobs', {
        name: `gpu-${n}`,
        stages: [{ name: 'train', resources: { cpu: 1, memory: '1Gi', gpu: { count: 1, type: 'h100' } }, command: ['sleep', '1'] }],
      });
      gpuJobs.push(r.body.id as string);
    }
    // Both GPUs in use well before the 200 CPU stages could drain (100 × 0.2 s on one machine).
    const started = await Promise.all(
      gpuJobs.map((id) =>
        until(
          'GPU stage running',
          () => attemptsOf(id),
          (st) => st[0]!.attempts[0]?.startedAt != null,
          20_000,
        ),
      ),
    );
    for (const st of started) {
      expect(st[0]!.attempts[0]!.machine).toBe('gpu-1');
      expect(st[0]!.attempts[0]!.startedAt! - submittedAt).toBeLessThan(5000);
    }
    const stillWaiting = (await attemptsOf(flood.body.id)).filter((s) => s.state === 'ready').length;
    expect(stillWaiting).toBeGreaterThan(0);

    // A CPU stage that allows GPU machines, while both GPUs are busy, takes what is left there.
    const allowed = await post('/v1/jobs', {
      name: 'allowed',
      stages: [{ name: 'side', resources: { cpu: 1, memory: '256Mi' }, placement: { allowGpuMachines: true }, command: ['sleep', '0.2'] }],
    });
    const side = await until(
      'allowed stage ran',
      () => attemptsOf(allowed.body.id),
      (st) => st[0]!.state === 'succeeded',
      30_000,
    );

    const done = await until(
      'flood done',
      () => attemptsOf(flood.body.id),
      (st) => st.every((s) => s.state === 'succeeded'),
      90_000,
    );
    // Not one of the 200 ran on the GPU machine.
    expect(new Set(done.flatMap((s) => s.attempts.map((a) => a.machine)))).toEqual(new Set(['cpu-1']));
    expect(['cpu-1', 'gpu-1']).toContain(side[0]!.attempts[0]!.machine);
  }, 120_000);
});

describe('a large GPU stage is not starved by small ones (reservations)', () => {
  let g: RunningGantry;
  beforeAll(async () => {
    g = await startGantryUp({ cluster: 'machines:\n  - { name: gpu-4, cpu: 8, memory: 16Gi, gpus: { type: h100, count: 4 } }\n' });
    await until(
      'the machine',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines?.length === 1,
    );
  });
  afterAll(async () => {
    await g?.stop();
  });

  it('a priority-900 4-GPU job behind busy GPUs starts before twelve priority-10 one-GPU jobs submitted after it', async () => {
    const post = (body: unknown) =>
      api(g.url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).then((r) => r.body.id as string);
    const gpuJob = (name: string, count: number, priority: number, seconds: number) => ({
      name,
      priority,
      stages: [{ name: 'run', resources: { cpu: 0.5, memory: '256Mi', gpu: { count, type: 'h100' } }, command: ['sleep', String(seconds)] }],
    });
    const startedAt = async (id: string) => ((await api(g.url, `/v1/jobs/${id}`)).body.stages[0].attempts[0]?.startedAt ?? null) as number | null;
    // Two GPUs busy for a while.
    const busy = [await post(gpuJob('busy-1', 1, 50, 3)), await post(gpuJob('busy-2', 1, 50, 3))];
    await Promise.all(
      busy.map((id) =>
        until(
          'busy running',
          () => startedAt(id),
          (t) => t !== null,
        ),
      ),
    );
    const big = await post(gpuJob('big', 4, 900, 1));
    const small: string[] = [];
    for (let i = 0; i < 12; i++) small.push(await post(gpuJob(`small-${i}`, 1, 10, 1)));
    const bigStart = await until(
      'big started',
      () => startedAt(big),
      (t) => t !== null,
      30_000,
    );
    const smallStarts = await Promise.all(
      small.map((id) =>
        until(
          'small started',
          () => startedAt(id),
          (t) => t !== null,
          60_000,
        ),
      ),
    );
    // Without the hold, two small ones would have taken the two free GPUs at once.
    expect(Math.min(...(smallStarts as number[]))).toBeGreaterThanOrEqual(bigStart!);
  }, 90_000);
});
