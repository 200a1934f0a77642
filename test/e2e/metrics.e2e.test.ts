import { describe, expect, it } from 'vitest';
import { api, gantryUpForSuite, until } from '../support/gantry-process.js';

/**
 * Prometheus metrics (issue 11): after a scripted workload, what /metrics says matches what the
 * database holds: attempts by outcome, queue depth and why stages wait, machines, resources, the
 * wait histogram's count; and Prometheus's conventions (issue 28): 0 for an empty queue, one unit
 * a name, Node's metrics without a doubled prefix.
 */
const CLUSTER = `
machines:
  - { name: cpu-1, cpu: 2, memory: 4Gi }
  - { name: gpu-1, cpu: 4, memory: 8Gi, gpus: { type: h100, count: 2 } }
`;

/** `name{labels} value` lines into a lookup by name and label text. */
function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m) out.set(`${m[1]}${m[2] ?? ''}`, Number(m[3]));
  }
  return out;
}

describe('/metrics', () => {
  const gantry = gantryUpForSuite({ cluster: CLUSTER, machines: 2 });

  const submit = (spec: unknown) =>
    api(gantry().url, '/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(spec) }).then(
      (r) => r.body.id as string,
    );
  const job = (id: string) => api(gantry().url, `/v1/jobs/${id}`).then((r) => r.body);

  it('matches the database after a scripted workload', async () => {
    const ok = await Promise.all(Array.from({ length: 5 }, (_, i) => submit({ name: `ok-${i}`, stages: [{ name: 's', command: ['true'] }] })));
    const bad = await Promise.all(
      Array.from({ length: 2 }, (_, i) => submit({ name: `bad-${i}`, retry: { maxAttempts: 1 }, stages: [{ name: 's', command: ['false'] }] })),
    );
    const nowhere = await submit({ name: 'nowhere', stages: [{ name: 's', resources: { gpu: { count: 1, type: 'tpu9' } }, command: ['true'] }] });
    const gpu = await submit({
      name: 'gpu',
      stages: [{ name: 's', resources: { cpu: 1, memory: '256Mi', gpu: { count: 1, type: 'h100' } }, command: ['sleep', '30'] }],
    });
    for (const id of [...ok, ...bad])
      await until(
        'ended',
        () => job(id),
        (j) => ['succeeded', 'failed'].includes(j.state),
        30_000,
      );
    await until(
      'gpu running',
      () => job(gpu),
      (j) => j.stages[0].state === 'running',
      30_000,
    );
    const m = parse((await api(gantry().url, '/metrics')).body as string);

    expect(m.get('gantry_attempts_total{outcome="succeeded"}')).toBe(5);
    expect(m.get('gantry_attempts_total{outcome="failed"}')).toBe(2);
    expect(m.get('gantry_queue_depth{pool="gpu:tpu9"}')).toBe(1);
    expect(m.get('gantry_stages_pending{pool="gpu:tpu9",reason="gpu-type"}')).toBe(1);
    expect(m.get('gantry_queue_oldest_wait_seconds{pool="gpu:tpu9"}')).toBeGreaterThan(0);
    expect(m.get('gantry_machines{pool="cpu",health="ready",scheduling="eligible"}')).toBe(1);
    expect(m.get('gantry_machines{pool="gpu:h100",health="ready",scheduling="eligible"}')).toBe(1);
    // The cpu queue is empty: its series say 0, not nothing (an alert on depth > N resolves).
    expect(m.get('gantry_queue_depth{pool="cpu"}')).toBe(0);
    expect(m.get('gantry_queue_oldest_wait_seconds{pool="cpu"}')).toBe(0);
    expect(m.get('gantry_stages_pending{pool="cpu",reason="placeable"}')).toBe(0);
    expect(m.get('gantry_pool_gpus{pool="gpu:h100",gpu_type="h100"}')).toBe(2);
    expect(m.get('gantry_pool_gpus_allocated{pool="gpu:h100",gpu_type="h100"}')).toBe(1);
    expect(m.get('gantry_pool_cpu_cores{pool="gpu:h100"}')).toBe(4);
    expect(m.get('gantry_pool_cpu_allocated_cores{pool="gpu:h100"}')).toBe(1);
    expect(m.get('gantry_pool_memory_allocated_bytes{pool="gpu:h100"}')).toBe(256 * 2 ** 20);
    expect(m.get('gantry_pool_memory_bytes{pool="cpu"}')).toBe(4 * 2 ** 30);
    // Node's process metrics under prom-client's own names, the prefix not doubled.
    expect(m.get('process_cpu_seconds_total')).toBeGreaterThan(0);
    expect([...m.keys()].filter((k) => k.startsWith('gantry_process_') || k.startsWith('gantry_resources_'))).toEqual([]);
    // Every placement was seen by the wait histogram, by its pool.
    expect(m.get('gantry_stage_wait_seconds_count{pool="cpu"}')).toBe(7);
    expect(m.get('gantry_stage_wait_seconds_count{pool="gpu:h100"}')).toBe(1);
    expect(m.get('gantry_scheduler_placements_total')).toBe(8);
    expect(m.get('gantry_outbox_lag_seconds')).toBe(0);
    const unplaced = await job(nowhere);
    expect(unplaced.stages[0].state).toBe('ready');
  }, 90_000);

  it('needs a token, as the API does', async () => {
    const r = await fetch(`${gantry().url}/metrics`);
    expect(r.status).toBe(401);
  });
});
