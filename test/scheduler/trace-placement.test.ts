/**
 * The real scheduler over the real Alibaba GPU trace (openb, 2023): one big pass with every pod
 * queued on the empty 1,523-machine cluster, and time-ordered replays of the first 2,000 pods.
 * Skipped, with a message, when ../shared/traces/alibaba-gpu-2023 is not beside the repository.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { normalizeGpuType } from '../../src/domain/resources.js';
import { firstReject, stageNeed } from '../../src/scheduler/checks.js';
import { planPlacements } from '../../src/scheduler/plan-placements.js';
import type { MachineView, Plan, QueuedStage, SchedulerSnapshot } from '../../src/scheduler/snapshot.js';
import { ALIBABA_TRACE_RELATIVE_DIR, hasAlibabaTrace, readNodeList, readPodList, type TracePod } from '../../src/sim/alibaba-trace.js';
import { replayTrace, withArrivalSpeedup, type ReplayResult } from '../../src/sim/trace-replay.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const TRACE_DIR = resolve(REPO, ALIBABA_TRACE_RELATIVE_DIR);
const HAVE_TRACE = existsSync(TRACE_DIR) && hasAlibabaTrace(TRACE_DIR);
const SKIP_NOTE = `SKIPPED: trace not found at ${TRACE_DIR} (clone the shared traces as ../shared beside the repo)`;
if (!HAVE_TRACE) console.warn(`[trace-placement.test] ${SKIP_NOTE}`);
const title = (t: string) => (HAVE_TRACE ? t : `${t}: ${SKIP_NOTE}`);

const REPLAY_PODS = 2000;

// ---------------------------------------------------------------- invariant checks

/**
 * A plan never takes more than the snapshot has free: per machine, summed CPU and memory within
 * free; each GPU index exists, is free, and is given at most once; the stage gets exactly its
 * count, all of one acceptable type; each stage at most once, on a ready machine.
 */
function expectPlanFits(snapshot: SchedulerSnapshot, plan: Plan): void {
  const machines = new Map(snapshot.machines.map((m) => [m.id, m]));
  const stages = new Map(snapshot.queue.map((s) => [s.stageId, s]));
  const used = new Map<string, { cpu: number; mem: number; gpus: Set<number> }>();
  const seen = new Set<string>();
  for (const p of plan.placements) {
    const m = machines.get(p.machineId);
    const s = stages.get(p.stageId);
    if (m === undefined || s === undefined) throw new Error(`placement ${p.stageId} -> ${p.machineId}: unknown stage or machine`);
    if (seen.has(p.stageId)) throw new Error(`${p.stageId} placed twice in one pass`);
    seen.add(p.stageId);
    expect(m.health).toBe('ready');
    expect(p.cpuMillis).toBe(s.resources.cpuMillis);
    expect(p.memoryBytes).toBe(s.resources.memoryBytes);
    const u = used.get(m.id) ?? { cpu: 0, mem: 0, gpus: new Set<number>() };
    u.cpu += p.cpuMillis;
    u.mem += p.memoryBytes;
    const need = stageNeed(s);
    if (p.gpuIndices.length !== need.gpuCount) throw new Error(`${p.stageId}: ${p.gpuIndices.length} GPUs, wants ${need.gpuCount}`);
    const types = new Set<string>();
    for (const i of p.gpuIndices) {
      const g = m.gpus.find((x) => x.index === i);
      if (g === undefined || !g.free) throw new Error(`${p.stageId}: GPU ${i} on ${m.id} missing or busy`);
      if (u.gpus.has(i)) throw new Error(`${p.stageId}: GPU ${i} on ${m.id} given twice`);
      u.gpus.add(i);
      const t = normalizeGpuType(g.type);
      if (need.gpuTypes.length > 0 && !need.gpuTypes.includes(t)) throw new Error(`${p.stageId}: got ${t}, wants ${need.gpuTypes.join('|')}`);
      types.add(t);
    }
    if (types.size > 1) throw new Error(`${p.stageId}: mixed GPU types`);
    used.set(m.id, u);
  }
  for (const [id, u] of used) {
    const m = machines.get(id)!;
    if (u.cpu > m.cpuMillisFree) throw new Error(`${id}: ${u.cpu} CPU millis planned, ${m.cpuMillisFree} free`);
    if (u.mem > m.memoryBytesFree) throw new Error(`${id}: ${u.mem} memory bytes planned, ${m.memoryBytesFree} free`);
  }
}

/** The replay's state as the scheduler sees it: free within [0, total] everywhere. */
function expectStateSane(machines: readonly MachineView[]): void {
  for (const m of machines) {
    if (m.cpuMillisFree < 0 || m.cpuMillisFree > m.cpuMillisTotal) throw new Error(`${m.id}: cpu free ${m.cpuMillisFree}`);
    if (m.memoryBytesFree < 0 || m.memoryBytesFree > m.memoryBytesTotal) throw new Error(`${m.id}: memory free ${m.memoryBytesFree}`);
  }
}

/**
 * Independent of the replay's own bookkeeping: sweep its placements over time and check that no
 * machine ever holds more CPU/memory than it has and no GPU index is held by two pods at once.
 * Releases at time t come before placements at t (the replay frees first, then plans).
 */
function expectNeverOverAllocated(machines: readonly MachineView[], r: ReplayResult): void {
  const byId = new Map(machines.map((m) => [m.id, m]));
  const events = r.placements.flatMap((p, i) => [
    { t: p.placedAt, kind: 1, i, p },
    { t: p.releasedAt, kind: 0, i, p },
  ]);
  events.sort((a, b) => a.t - b.t || a.kind - b.kind || a.i - b.i);
  const cpu = new Map<string, number>();
  const mem = new Map<string, number>();
  const holder = new Map<string, string>();
  for (const { kind, p } of events) {
    const m = byId.get(p.machineId)!;
    const sign = kind === 1 ? 1 : -1;
    const c = (cpu.get(m.id) ?? 0) + sign * p.cpuMillis;
    const b = (mem.get(m.id) ?? 0) + sign * p.memoryBytes;
    cpu.set(m.id, c);
    mem.set(m.id, b);
    if (c > m.cpuMillisTotal) throw new Error(`${m.id} over-allocated CPU at ${p.placedAt}`);
    if (b > m.memoryBytesTotal) throw new Error(`${m.id} over-allocated memory at ${p.placedAt}`);
    for (const g of p.gpuIndices) {
      const key = `${m.id}#${g}`;
      if (kind === 1) {
        if (holder.has(key)) throw new Error(`${key} held by ${holder.get(key)} and ${p.stageId}`);
        holder.set(key, p.stageId);
      } else {
        holder.delete(key);
      }
    }
  }
  expect(holder.size).toBe(0);
}

/** Fits the idle cluster: some ready machine passes every check (static and busy) when empty. */
function fitsEmpty(machines: readonly MachineView[], stage: QueuedStage): boolean {
  const need = stageNeed(stage);
  return machines.some((m) => firstReject(need, m) === null);
}

/** Replays with the per-pass checks on, then the whole-run checks; returns the result. */
function replayChecked(machines: MachineView[], pods: TracePod[]): ReplayResult {
  let passes = 0;
  const r = replayTrace(machines, pods, {
    onPass: ({ snapshot, plan }) => {
      passes += 1;
      expectStateSane(snapshot.machines);
      expectPlanFits(snapshot, plan);
      const reported = plan.placements.length + plan.pending.length;
      // Default cap: 1000 placements; below it every queued pod is reported.
      if (plan.placements.length < 1000) expect(reported).toBe(snapshot.queue.length);
      for (const p of plan.pending) expect(p.reason).not.toBe('');
    },
  });
  expect(r.stats.passes).toBe(passes);
  expectNeverOverAllocated(machines, r);

  const byName = new Map(pods.map((p) => [p.name, p]));
  const placed = new Set<string>();
  for (const p of r.placements) {
    const pod = byName.get(p.stageId)!;
    expect(placed.has(p.stageId)).toBe(false);
    placed.add(p.stageId);
    expect(p.placedAt).toBeGreaterThanOrEqual(pod.creationTime);
    expect(p.releasedAt - p.placedAt).toBeCloseTo(pod.holdSeconds, 6);
  }
  // Every pod that fits the empty cluster is eventually placed; the rest are reported with why.
  const neverPlaced = new Map(r.neverPlaced.map((p) => [p.stageId, p.reason]));
  for (const pod of pods) {
    if (fitsEmpty(machines, pod.stage)) {
      expect(placed.has(pod.name), `${pod.name} fits the empty cluster but was never placed`).toBe(true);
    } else {
      expect(neverPlaced.get(pod.name)).toMatch(/^no ready machine can run it: /);
    }
  }
  expect(placed.size + neverPlaced.size).toBe(pods.length);
  // At the end everything has left: the utilisation series ends at zero.
  expect(r.utilisation[r.utilisation.length - 1]?.allocatedGpus).toBe(0);
  return r;
}

// ---------------------------------------------------------------- tests

describe.skipIf(!HAVE_TRACE)(title('planPlacements over the whole alibaba-gpu-2023 trace at once'), () => {
  const machines = HAVE_TRACE ? readNodeList(TRACE_DIR) : [];

  for (const list of ['default', 'gpuspec33'] as const) {
    it(`${list}: 8,152 pods on 1,523 idle machines, no over-allocation, every pod placed or pending with a reason`, () => {
      const pods = readPodList(list, TRACE_DIR);
      const snapshot: SchedulerSnapshot = { machines, queue: pods.map((p) => p.stage) };
      const plan = planPlacements(snapshot, { maxPlacements: Infinity });

      expectPlanFits(snapshot, plan);
      const placed = new Set(plan.placements.map((p) => p.stageId));
      const pending = new Set(plan.pending.map((p) => p.stageId));
      expect(placed.size).toBe(plan.placements.length);
      expect(pending.size).toBe(plan.pending.length);
      expect(placed.size + pending.size).toBe(pods.length);
      for (const id of pending) expect(placed.has(id)).toBe(false);
      // The whole trace at once needs more than the cluster has (7,433 whole GPUs for 6,212).
      expect(placed.size).toBeGreaterThan(6000);
      expect(pending.size).toBeGreaterThan(0);
      const stages = new Map(snapshot.queue.map((s) => [s.stageId, s]));
      for (const p of plan.pending) {
        expect(p.reason).not.toBe('');
        // A pod that would fit the idle cluster waits for capacity; one that never fits says so.
        const stage = stages.get(p.stageId)!;
        if (fitsEmpty(machines, stage)) expect(p.reason).toMatch(/busy$/);
        else expect(p.reason).toMatch(/^no ready machine can run it: /);
      }
      // The snapshot was not touched.
      expect(machines.every((m) => m.cpuMillisFree === m.cpuMillisTotal && m.gpus.every((g) => g.free))).toBe(true);

      if (list === 'default') {
        // Determinism: the same plan from the queue and machine list in reverse order.
        const rev = { machines: [...machines].reverse(), queue: [...snapshot.queue].reverse() };
        expect(planPlacements(rev, { maxPlacements: Infinity })).toEqual(plan);
      }
    });
  }

  it('default options stop at 1,000 placements and report only the stages before the cap', () => {
    const pods = readPodList('default', TRACE_DIR);
    const snapshot: SchedulerSnapshot = { machines, queue: pods.map((p) => p.stage) };
    const plan = planPlacements(snapshot);
    expectPlanFits(snapshot, plan);
    expect(plan.placements).toHaveLength(1000);
    expect(plan.placements.length + plan.pending.length).toBeLessThan(pods.length);
  });
});

describe.skipIf(!HAVE_TRACE)(title(`replay of the first ${REPLAY_PODS} alibaba-gpu-2023 pods`), () => {
  const machines = HAVE_TRACE ? readNodeList(TRACE_DIR) : [];
  const pods = HAVE_TRACE ? readPodList('default', TRACE_DIR).slice(0, REPLAY_PODS) : [];

  it('at trace speed on the whole cluster: invariants at every pass, every pod placed', () => {
    const r = replayChecked(machines, pods);
    // The sample is sparse in time: at trace speed nothing ever waits.
    expect(r.stats.placed).toBe(REPLAY_PODS);
    expect(r.stats.gpuUtilisation.peak).toBeLessThan(0.05);
  });

  it('10,000x faster on a quarter of the cluster (contended): invariants hold, pods wait, fitting pods are placed', () => {
    const quarter = machines.filter((_, i) => i % 4 === 0);
    const fast = withArrivalSpeedup(pods, 10_000);
    const r = replayChecked(quarter, fast);
    expect(r.stats.placedOnArrival).toBeLessThan(REPLAY_PODS);
    expect(r.stats.waitSeconds?.max ?? 0).toBeGreaterThan(0);
    expect(r.stats.gpuUtilisation.peak).toBeGreaterThan(0.9);
    // Deterministic.
    expect(replayTrace(quarter, fast)).toEqual(r);
  });

  it('gpuspec33 (GPU type constraints), 1,000x faster on another quarter: invariants hold, pods wait', () => {
    const spec = readPodList('gpuspec33', TRACE_DIR).slice(0, REPLAY_PODS);
    const r = replayChecked(
      machines.filter((_, i) => i % 4 === 1),
      withArrivalSpeedup(spec, 1000),
    );
    expect(r.stats.placedOnArrival).toBeLessThan(REPLAY_PODS);
  });
});
