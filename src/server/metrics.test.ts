import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AttemptEnd } from '../domain/attempt-end.js';
import { cpuMachine, gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { WAIT_REASON_KINDS } from '../scheduler/wait-reason-kind.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { Metrics } from './metrics.js';

/** A metric's values by their labels joined ("g,start"). */
const values = async (metrics: Metrics, name: string) =>
  Object.fromEntries((await metrics.registry.getSingleMetric(name)!.get()).values.map((v) => [Object.values(v.labels).join(','), v.value]));

/** The counters that follow the event log: attempts ended, by outcome and by how they ended. */
describe('Metrics: attempts ended', () => {
  let store: Store;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  /** A one-stage job run on the machine to the end the agent reports. */
  const ended = async (machineId: string, end: AttemptEnd, exitCode: number | null) => {
    const j = await store.jobSubmit({
      definition: job([stage('a', { retry: { maxAttempts: 1, backoff: { initialSeconds: 1, maxSeconds: 1 }, onExitCodes: null, maxLost: 0 } })]),
      source: null,
      now,
    });
    const r = await store.planApply({
      plan: { placements: [{ stageId: j.stages[0]!.id, machineId, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 20 }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    const a = r.applied[0]!;
    await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now, leaseMs: 10_000 });
    await store.attemptComplete({ attemptId: a.id, token: a.token, exitCode, signal: exitCode === null ? 'SIGKILL' : null, end, outputs: [], now, jitter: 0 });
    return j.id;
  };

  it('counts each end by its outcome and by its kind, so oom-killed is visible apart from the other failures', async () => {
    const m = await store.machineRegister({ ...cpuMachine('c1'), now });
    const metrics = new Metrics(store, () => now);
    // Counters start at the log's head: what ended before the process started is not counted.
    await ended(m.id, { kind: 'exited', detail: null }, 0);
    await metrics.start();
    await ended(m.id, { kind: 'exited', detail: null }, 0);
    await ended(m.id, { kind: 'oom-killed', detail: 'killed by its memory limit' }, null);
    await ended(m.id, { kind: 'oom-killed', detail: 'killed by its memory limit' }, null);
    await ended(m.id, { kind: 'exited', detail: null }, 3);
    const canceled = await store.jobSubmit({ definition: job([stage('b')]), source: null, now });
    const r = await store.planApply({
      plan: { placements: [{ stageId: canceled.stages[0]!.id, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 20 }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    await store.attemptStart({ attemptId: r.applied[0]!.id, token: r.applied[0]!.token, pid: 2, now, leaseMs: 10_000 });
    await store.jobCancel({ jobId: canceled.id, now, reason: 'canceled by user' });
    await metrics.catchUp();
    expect(await values(metrics, 'gantry_attempts_total')).toEqual({ succeeded: 1, failed: 3, canceled: 1 });
    expect(await values(metrics, 'gantry_attempt_ends_total')).toEqual({ exited: 2, 'oom-killed': 2, killed: 1 });
  });
});

/** `name{labels} value` lines of the text Prometheus scrapes, by name and label text. */
function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m) out.set(`${m[1]}${m[2] ?? ''}`, Number(m[3]));
  }
  return out;
}

/** Prometheus's conventions (issue 28): zeros rather than no series, one unit a name, no doubled prefix. */
describe('Metrics: names and zeros', () => {
  let store: Store;
  let now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('an empty queue reads 0 for every known pool (and reason), not no series', async () => {
    await store.machineRegister({ ...cpuMachine('c1'), now });
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    const m = parse(await new Metrics(store, () => now).text());
    for (const pool of ['cpu', 'gpu:h100']) {
      expect(m.get(`gantry_queue_depth{pool="${pool}"}`), pool).toBe(0);
      expect(m.get(`gantry_queue_oldest_wait_seconds{pool="${pool}"}`), pool).toBe(0);
      for (const reason of WAIT_REASON_KINDS) expect(m.get(`gantry_stages_pending{pool="${pool}",reason="${reason}"}`), `${pool} ${reason}`).toBe(0);
    }
    expect(WAIT_REASON_KINDS).toEqual(expect.arrayContaining(['placeable', 'gpu-busy', 'gpu-type', 'no-machines']));
  });

  it('a queue counts where it waits; the other pools stay at 0', async () => {
    const c = await store.machineRegister({ ...cpuMachine('c1'), now });
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    await store.jobSubmit({
      definition: job([stage('t', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['tpu9'] } } })]),
      source: null,
      now,
    });
    const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
    await store.planApply({
      plan: { placements: [{ stageId: j.stages[0]!.id, machineId: c.id, gpuIndices: [], cpuMillis: 1500, memoryBytes: 2 ** 30 }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    now += 4000;
    const m = parse(await new Metrics(store, () => now).text());
    expect(m.get('gantry_queue_depth{pool="gpu:tpu9"}')).toBe(1);
    expect(m.get('gantry_queue_oldest_wait_seconds{pool="gpu:tpu9"}')).toBe(4);
    expect(m.get('gantry_stages_pending{pool="gpu:tpu9",reason="gpu-type"}')).toBe(1);
    expect(m.get('gantry_stages_pending{pool="gpu:tpu9",reason="placeable"}')).toBe(0);
    expect(m.get('gantry_queue_depth{pool="cpu"}')).toBe(0);
    expect(m.get('gantry_stages_pending{pool="gpu:h100",reason="gpu-busy"}')).toBe(0);
  });

  it('a gang waits by the gang’s rule: one machine with room for a member is not room for a gang of 2', async () => {
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    await store.jobSubmit({
      definition: job([stage('train', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] }, machines: 2 } })]),
      source: null,
      now,
    });
    let m = parse(await new Metrics(store, () => now).text());
    expect(m.get('gantry_stages_pending{pool="gpu:h100",reason="gang-machines"}')).toBe(1);
    expect(m.get('gantry_stages_pending{pool="gpu:h100",reason="placeable"}')).toBe(0);
    // A second machine: the gang fits now.
    await store.machineRegister({ ...gpuMachine('g2', 2), now });
    m = parse(await new Metrics(store, () => now).text());
    expect(m.get('gantry_stages_pending{pool="gpu:h100",reason="placeable"}')).toBe(1);
    expect(m.get('gantry_stages_pending{pool="gpu:h100",reason="gang-machines"}')).toBe(0);
  });

  it('resources: one quantity and unit a name, capacity and allocation apart', async () => {
    const c = await store.machineRegister({ ...cpuMachine('c1'), now });
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
    await store.planApply({
      plan: { placements: [{ stageId: j.stages[0]!.id, machineId: c.id, gpuIndices: [], cpuMillis: 1500, memoryBytes: 2 ** 30 }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    const text = await new Metrics(store, () => now).text();
    const m = parse(text);
    expect(m.get('gantry_pool_cpu_cores{pool="cpu"}')).toBe(8);
    expect(m.get('gantry_pool_cpu_cores{pool="gpu:h100"}')).toBe(32);
    expect(m.get('gantry_pool_cpu_allocated_cores{pool="cpu"}')).toBe(1.5);
    expect(m.get('gantry_pool_cpu_allocated_cores{pool="gpu:h100"}')).toBe(0);
    expect(m.get('gantry_pool_memory_bytes{pool="cpu"}')).toBe(16 * 2 ** 30);
    expect(m.get('gantry_pool_memory_allocated_bytes{pool="cpu"}')).toBe(2 ** 30);
    expect(m.get('gantry_pool_gpus{pool="gpu:h100",gpu_type="h100"}')).toBe(2);
    expect(m.get('gantry_pool_gpus_allocated{pool="gpu:h100",gpu_type="h100"}')).toBe(0);
    expect(text).toMatch(/^# TYPE gantry_pool_gpus gauge$/m);
    expect([...m.keys()].filter((k) => k.startsWith('gantry_resources_'))).toEqual([]);
    // Node's metrics under prom-client's own names, with no doubled prefix.
    expect(m.has('process_cpu_seconds_total')).toBe(true);
    expect([...m.keys()].filter((k) => /^gantry_process_|process_process/.test(k))).toEqual([]);
  });
});

/** The autoscaler's series (docs/autoscaling.md, "Metrics"): machines from the rows, decisions and GPU time from its passes. */
describe('Metrics: autoscaled pools', () => {
  let store: Store;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('has every declared pool at 0, counts machines by lifecycle from the database and decisions and GPU-seconds from passes', async () => {
    const metrics = new Metrics(store, () => now, ['g', 'idle']);
    await store.autoscaleStart({ pool: 'g', heldFor: [[], []], reason: 'test', now });
    await store.machineRegister({ ...gpuMachine('g-1', 4), now });
    expect(await values(metrics, 'gantry_autoscale_desired_machines')).toEqual({ g: 2, idle: 0 });
    expect(await values(metrics, 'gantry_autoscale_ready_machines')).toEqual({ g: 1, idle: 0 });
    expect(await values(metrics, 'gantry_autoscale_starting_machines')).toEqual({ g: 1, idle: 0 });
    expect(await values(metrics, 'gantry_autoscale_decisions_total')).toMatchObject({ 'g,start': 0, 'idle,fail': 0 });
    metrics.autoscalePass({
      decisions: [{ pool: 'g', action: 'start', names: ['g-1', 'g-2'], reason: 'test' }],
      pools: [],
      gpuSeconds: [{ pool: 'g', provisioned: 40, idle: 30 }],
    });
    metrics.autoscalePass({ decisions: [], pools: [], gpuSeconds: [{ pool: 'g', provisioned: 40, idle: 10 }] });
    expect(await values(metrics, 'gantry_autoscale_decisions_total')).toMatchObject({ 'g,start': 1, 'g,drain': 0 });
    expect(await values(metrics, 'gantry_autoscale_gpu_seconds_total')).toEqual({ g: 80, idle: 0 });
    expect(await values(metrics, 'gantry_autoscale_idle_gpu_seconds_total')).toEqual({ g: 40, idle: 0 });
  });

  it('with no pool declared, no autoscaler series', async () => {
    const metrics = new Metrics(store, () => now);
    expect(await values(metrics, 'gantry_autoscale_desired_machines')).toEqual({});
  });
});
