import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { MachineView } from '../scheduler/snapshot.js';
import {
  defaultAlibabaTraceDir,
  hasAlibabaTrace,
  NODE_LIST_FILE,
  parseNodeList,
  parsePodList,
  POD_LIST_FILES,
  QOS_PRIORITY,
  readNodeList,
  readPodList,
  type TracePod,
} from './alibaba-trace.js';
import { replayTrace, summarise, utilisationBuckets, withArrivalSpeedup } from './trace-replay.js';

const MiB = 1024 * 1024;
const NODE_HEADER = 'sn,cpu_milli,memory_mib,gpu,model';
const POD_HEADER = 'name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time';

const nodes = (...rows: string[]) => parseNodeList([NODE_HEADER, ...rows].join('\n'));
const pods = (...rows: string[]) => parsePodList([POD_HEADER, ...rows].join('\n'));

// ---------------------------------------------------------------- parsing, no trace needed

describe('parseNodeList', () => {
  it('turns rows into idle ready machines with indexed, lower-cased GPUs', () => {
    const [cpu, gpu] = nodes('n-0,32000,262144,0,', 'n-1,96000,786432,2,V100M32');
    expect(cpu).toEqual({
      id: 'n-0',
      name: 'n-0',
      health: 'ready',
      scheduling: 'eligible',
      region: null,
      labels: {},
      cpuMillisTotal: 32000,
      memoryBytesTotal: 262144 * MiB,
      cpuMillisFree: 32000,
      memoryBytesFree: 262144 * MiB,
      gpus: [],
    });
    expect(gpu?.gpus).toEqual([
      { index: 0, type: 'v100m32', free: true },
      { index: 1, type: 'v100m32', free: true },
    ]);
  });

  it('accepts CRLF, a trailing newline and "nan" for a missing model', () => {
    const ms = parseNodeList(`${NODE_HEADER}\r\nn-0,1000,1,0,nan\r\n`);
    expect(ms).toHaveLength(1);
    expect(ms[0]?.gpus).toEqual([]);
  });

  it('rejects malformed input with the line number', () => {
    expect(() => nodes('n-0,32000,262144,2,')).toThrow(/line 2: 2 GPUs without a model/);
    expect(() => nodes('n-0,lots,262144,0,')).toThrow(/line 2: cpu_milli is not an integer/);
    expect(() => nodes('n-0,1000,1,0')).toThrow(/line 2: 4 fields, header has 5/);
    expect(() => nodes('"n-0",1000,1,0,')).toThrow(/quoted fields/);
    expect(() => parseNodeList('sn,cpu_milli,gpu,model\nn,1,0,')).toThrow(/missing column "memory_mib"/);
  });
});

describe('parsePodList', () => {
  it('maps a GPU pod: whole GPUs, types split, lower-cased and de-duplicated', () => {
    const [p] = pods('pod-a,3152,5600,1,1000,V100M16|V100M32|V100M32,BE,Running,100,160,110');
    expect(p).toEqual({
      name: 'pod-a',
      qos: 'BE',
      phase: 'Running',
      creationTime: 100,
      deletionTime: 160,
      scheduledTime: 110,
      gpuMilli: 1000,
      fractionalGpu: false,
      holdSeconds: 50,
      stage: {
        stageId: 'pod-a',
        jobId: 'pod-a',
        stageName: 'pod-a',
        pool: 'gpu:any',
        priority: QOS_PRIORITY.BE,
        readySince: 100_000,
        resources: { cpuMillis: 3152, memoryBytes: 5600 * MiB, gpu: { count: 1, types: ['v100m16', 'v100m32'] } },
        placement: { region: null, labels: {} },
      },
    } satisfies TracePod);
  });

  it('counts a fractional-GPU pod as one whole GPU', () => {
    const [p] = pods('pod-f,4000,15258,1,220,T4,BE,Running,0,10,0');
    expect(p?.fractionalGpu).toBe(true);
    expect(p?.gpuMilli).toBe(220);
    expect(p?.stage.resources.gpu).toEqual({ count: 1, types: ['t4'] });
    expect(p?.stage.pool).toBe('gpu:t4');
  });

  it('maps CPU pods to the cpu pool and a Pending pod (no scheduled_time) to its lifetime', () => {
    const [cpu, pending] = pods('pod-c,20000,65536,0,0,,LS,Running,5,9,7', 'pod-p,11908,47104,1,1000,,BE,Pending,100,225,');
    expect(cpu?.stage.resources.gpu).toBeNull();
    expect(cpu?.stage.pool).toBe('cpu');
    expect(cpu?.holdSeconds).toBe(2);
    expect(pending?.scheduledTime).toBeNull();
    expect(pending?.holdSeconds).toBe(125);
    expect(pending?.stage.pool).toBe('gpu:any');
  });

  it('orders QoS classes Guaranteed > LS > Burstable > BE and refuses unknown ones', () => {
    const ps = pods('a,1,1,0,0,,BE,Running,0,1,0', 'b,1,1,0,0,,Burstable,Running,0,1,0', 'c,1,1,0,0,,LS,Running,0,1,0', 'd,1,1,0,0,,Guaranteed,Running,0,1,0');
    const prio = ps.map((p) => p.stage.priority);
    expect(prio).toEqual([...prio].sort((x, y) => x - y));
    expect(new Set(prio).size).toBe(4);
    expect(() => pods('a,1,1,0,0,,Platinum,Running,0,1,0')).toThrow(/unknown qos "Platinum"/);
    expect(() => pods('a,1,1,0,0,,toString,Running,0,1,0')).toThrow(/unknown qos "toString"/);
    expect(() => pods('a,1,1,0,0,,BE,Running,,1,0')).toThrow(/creation_time is not an integer/);
  });
});

// ---------------------------------------------------------------- replay on tiny inputs

function machine(name: string, gpus: number, cpu = 8000, memMiB = 1024): MachineView {
  return {
    id: name,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: null,
    labels: {},
    cpuMillisTotal: cpu,
    memoryBytesTotal: memMiB * MiB,
    cpuMillisFree: cpu,
    memoryBytesFree: memMiB * MiB,
    gpus: Array.from({ length: gpus }, (_, index) => ({ index, type: 't4', free: true })),
  };
}

describe('replayTrace', () => {
  it('queues a pod until the one holding the GPU leaves, and accounts waits and utilisation', () => {
    // One machine with one GPU; pod a holds it 0..100, b arrives at 10 and runs 100..150.
    const ps = pods('a,1000,1,1,1000,,BE,Running,0,100,0', 'b,1000,1,1,500,,BE,Running,10,60,10');
    const passes: number[] = [];
    const r = replayTrace([machine('m', 1)], ps, { onPass: (p) => passes.push(p.time) });
    expect(r.placements.map((p) => [p.stageId, p.placedAt, p.releasedAt, p.waitSeconds])).toEqual([
      ['a', 0, 100, 0],
      ['b', 100, 150, 90],
    ]);
    expect(passes).toEqual([0, 10, 100]);
    expect(r.neverPlaced).toEqual([]);
    expect(r.utilisation).toEqual([
      { time: 0, allocatedGpus: 1 },
      { time: 150, allocatedGpus: 0 },
    ]);
    expect(r.stats).toMatchObject({
      pods: 2,
      placed: 2,
      neverPlaced: 0,
      placedOnArrival: 1,
      passes: 3,
      waitSeconds: { mean: 45, median: 45, p95: 90, p99: 90, max: 90 },
      gpuUtilisation: { totalGpus: 1, mean: 1, meanWhileArriving: 1, peak: 1 },
      startTime: 0,
      lastArrival: 10,
      endTime: 150,
    });
    // The replay works on copies.
    expect(machine('m', 1)).toEqual(machine('m', 1));
  });

  it('places higher QoS first when both wait, and reports pods that fit nowhere', () => {
    const ps = pods(
      'hog,1000,1,2,1000,,BE,Running,0,50,0',
      'be,1000,1,2,1000,,BE,Running,1,2,1',
      'ls,1000,1,2,1000,,LS,Running,2,3,2',
      'huge,1000,1,8,1000,,LS,Running,3,4,3',
    );
    const r = replayTrace([machine('m', 2)], ps);
    expect(r.placements.map((p) => [p.stageId, p.placedAt])).toEqual([
      ['hog', 0],
      ['ls', 50],
      ['be', 51],
    ]);
    expect(r.neverPlaced).toEqual([{ stageId: 'huge', reason: 'no ready machine can run it: 1 lacks 8 GPUs', unplaceable: true }]);
    expect(r.stats.gpuUtilisation).toMatchObject({ totalGpus: 2, peak: 1 });
    // Both GPUs busy from 0 to 52 (hog, then ls, then be); the arrivals end at 3.
    expect(r.stats.gpuUtilisation.mean).toBe(1);
    expect(r.stats.waitSeconds).toEqual({ mean: (0 + 48 + 50) / 3, median: 48, p95: 50, p99: 50, max: 50 });
  });

  it('runs another pass at the same time when a pass stops at maxPlacements', () => {
    const ps = pods('a,1000,1,0,0,,BE,Running,0,5,0', 'b,1000,1,0,0,,BE,Running,0,5,0', 'c,1000,1,0,0,,BE,Running,0,5,0');
    const r = replayTrace([machine('m', 0)], ps, { planOptions: { maxPlacements: 1 } });
    expect(r.placements.map((p) => [p.stageId, p.placedAt])).toEqual([
      ['a', 0],
      ['b', 0],
      ['c', 0],
    ]);
    expect(r.stats.passes).toBe(3);
  });

  it('handles zero-length pods and is deterministic', () => {
    const ps = pods('a,8000,1,1,1000,,BE,Running,0,0,0', 'b,8000,1,1,1000,,BE,Running,0,0,0', 'c,1000,1,0,0,,LS,Running,3,9,3');
    // c is CPU work: on the CPU machine (the GPU machine keeps its CPUs for GPU work).
    const r = replayTrace([machine('m', 1), machine('n', 0)], ps);
    expect(r.placements.map((p) => [p.stageId, p.placedAt, p.releasedAt])).toEqual([
      ['a', 0, 0],
      ['b', 0, 0],
      ['c', 3, 9],
    ]);
    expect(replayTrace([machine('m', 1), machine('n', 0)], ps)).toEqual(r);
  });

  it('throws when a plan would over-allocate (the apply re-check)', () => {
    const ps = pods('a,1000,1,1,1000,,BE,Running,0,10,0');
    // The scheduler never plans beyond free capacity, so the hook takes the GPU behind its back.
    expect(() =>
      replayTrace([machine('m', 1)], ps, {
        onPass: ({ snapshot }) => {
          snapshot.machines[0]!.gpus[0]!.free = false;
        },
      }),
    ).toThrow('replay: a on m: GPU 0 already allocated');
  });
});

describe('helpers', () => {
  it('summarise: mean, median, nearest-rank p95 and p99, max', () => {
    expect(summarise([])).toBeNull();
    expect(summarise([3, 1, 2, 4])).toEqual({ mean: 2.5, median: 2.5, p95: 4, p99: 4, max: 4 });
    expect(summarise(Array.from({ length: 100 }, (_, i) => i + 1))).toMatchObject({ p95: 95, p99: 99, max: 100 });
    expect(summarise(Array.from({ length: 1000 }, (_, i) => i + 1))).toMatchObject({ p95: 950, p99: 990 });
  });

  it('utilisationBuckets: time-weighted means per bucket', () => {
    const series = [
      { time: 0, allocatedGpus: 2 },
      { time: 5, allocatedGpus: 0 },
      { time: 15, allocatedGpus: 4 },
    ];
    expect(utilisationBuckets(series, 4, 0, 20, 10)).toEqual([
      { start: 0, mean: 10 / 40 },
      { start: 10, mean: 20 / 40 },
    ]);
  });

  it('withArrivalSpeedup: earlier arrivals, same hold, same order', () => {
    const ps = pods('a,1,1,0,0,,BE,Running,100,160,110', 'b,1,1,0,0,,BE,Pending,200,300,');
    const fast = withArrivalSpeedup(ps, 10);
    expect(fast.map((p) => [p.creationTime, p.stage.readySince, p.holdSeconds, p.deletionTime - (p.scheduledTime ?? p.creationTime)])).toEqual([
      [10, 10_000, 50, 50],
      [20, 20_000, 100, 100],
    ]);
    expect(ps[0]?.creationTime).toBe(100);
    expect(() => withArrivalSpeedup(ps, 0)).toThrow(/positive/);
  });
});

// ---------------------------------------------------------------- the real trace

const TRACE_DIR = defaultAlibabaTraceDir();
const HAVE_TRACE = hasAlibabaTrace(TRACE_DIR);
const title = HAVE_TRACE
  ? 'alibaba-gpu-2023 trace files'
  : `alibaba-gpu-2023 trace files: SKIPPED, trace not found at ${TRACE_DIR} (expected ../shared/traces/alibaba-gpu-2023 beside the repo)`;
if (!HAVE_TRACE) console.warn(`[alibaba-trace.test] ${title}`);

/** The raw CSV line that starts with `name,`, to check parsed rows against the file itself. */
function rawLine(file: string, name: string): string | undefined {
  return readFileSync(join(TRACE_DIR, file), 'utf8')
    .split(/\r?\n/)
    .find((l) => l.startsWith(`${name},`));
}

describe.skipIf(!HAVE_TRACE)(title, () => {
  it('node list: 1,523 machines, 310 without GPUs, 6,212 GPUs by model', () => {
    const ms = readNodeList(TRACE_DIR);
    expect(ms).toHaveLength(1523);
    expect(new Set(ms.map((m) => m.id)).size).toBe(1523);
    const cpuOnly = ms.filter((m) => m.gpus.length === 0);
    expect(cpuOnly).toHaveLength(310);
    for (const m of cpuOnly) expect(m.gpus).toEqual([]);
    const byType = new Map<string, number>();
    for (const m of ms) {
      expect(m.health).toBe('ready');
      expect(m.cpuMillisFree).toBe(m.cpuMillisTotal);
      expect(m.memoryBytesFree).toBe(m.memoryBytesTotal);
      expect(m.gpus.map((g) => g.index)).toEqual(m.gpus.map((_, i) => i));
      for (const g of m.gpus) byType.set(g.type, (byType.get(g.type) ?? 0) + 1);
    }
    expect(Object.fromEntries([...byType].sort())).toEqual({
      a10: 2,
      g2: 4392,
      g3: 312,
      p100: 265,
      t4: 842,
      v100m16: 195,
      v100m32: 204,
    });
  });

  it('node list: rows match the CSV exactly', () => {
    const ms = new Map(readNodeList(TRACE_DIR).map((m) => [m.id, m]));
    const cases: [string, string, number, number, string[]][] = [
      ['openb-node-0000', 'openb-node-0000,32000,262144,0,', 32000, 262144, []],
      ['openb-node-0233', 'openb-node-0233,32000,131072,4,V100M16', 32000, 131072, ['v100m16', 'v100m16', 'v100m16', 'v100m16']],
      ['openb-node-1328', 'openb-node-1328,128000,1048576,1,A10', 128000, 1048576, ['a10']],
      ['openb-node-1520', 'openb-node-1520,104000,524288,2,T4', 104000, 524288, ['t4', 't4']],
    ];
    for (const [sn, line, cpu, memMiB, types] of cases) {
      expect(rawLine(NODE_LIST_FILE, sn)).toBe(line);
      const m = ms.get(sn)!;
      expect(m).toMatchObject({ name: sn, cpuMillisTotal: cpu, memoryBytesTotal: memMiB * MiB, region: null, labels: {} });
      expect(m.gpus).toEqual(types.map((type, index) => ({ index, type, free: true })));
    }
  });

  it('pod lists: 8,152 pods each, unique names, in creation order', () => {
    for (const list of ['default', 'gpuspec33'] as const) {
      const ps = readPodList(list, TRACE_DIR);
      expect(ps).toHaveLength(8152);
      expect(new Set(ps.map((p) => p.name)).size).toBe(8152);
      expect(ps.filter((p) => p.stage.resources.gpu === null)).toHaveLength(1088);
      expect(ps.filter((p) => p.fractionalGpu)).toHaveLength(3078);
      expect(ps.filter((p) => p.scheduledTime === null)).toHaveLength(897);
      for (let i = 1; i < ps.length; i++) expect(ps[i]!.creationTime).toBeGreaterThanOrEqual(ps[i - 1]!.creationTime);
    }
  });

  it('pod lists: rows match the CSV exactly', () => {
    const get = (list: 'default' | 'gpuspec33') => new Map(readPodList(list, TRACE_DIR).map((p) => [p.name, p]));
    const def = get('default');
    const spec = get('gpuspec33');

    expect(rawLine(POD_LIST_FILES.default, 'openb-pod-0017')).toBe('openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497');
    expect(def.get('openb-pod-0017')).toMatchObject({
      qos: 'Burstable',
      phase: 'Succeeded',
      creationTime: 9437497,
      deletionTime: 10769854,
      scheduledTime: 9437497,
      holdSeconds: 10769854 - 9437497,
      fractionalGpu: false,
      stage: {
        pool: 'gpu:any',
        priority: QOS_PRIORITY.Burstable,
        readySince: 9437497_000,
        resources: { cpuMillis: 88000, memoryBytes: 327680 * MiB, gpu: { count: 8, types: [] } },
      },
    });

    expect(rawLine(POD_LIST_FILES.default, 'openb-pod-0005')).toBe('openb-pod-0005,20000,65536,0,0,,LS,Running,2759674,12902960,2759676');
    expect(def.get('openb-pod-0005')?.stage).toMatchObject({
      pool: 'cpu',
      priority: QOS_PRIORITY.LS,
      resources: { cpuMillis: 20000, memoryBytes: 65536 * MiB, gpu: null },
    });
    expect(def.get('openb-pod-0005')?.holdSeconds).toBe(12902960 - 2759676);

    expect(rawLine(POD_LIST_FILES.gpuspec33, 'openb-pod-0022')).toBe('openb-pod-0022,4000,15258,1,220,T4,BE,Running,9679175,9973826,9679175');
    expect(spec.get('openb-pod-0022')).toMatchObject({
      gpuMilli: 220,
      fractionalGpu: true,
      stage: { pool: 'gpu:t4', priority: QOS_PRIORITY.BE, resources: { cpuMillis: 4000, memoryBytes: 15258 * MiB, gpu: { count: 1, types: ['t4'] } } },
    });
    // The same pod in the default list has no type constraint.
    expect(def.get('openb-pod-0022')?.stage.resources.gpu).toEqual({ count: 1, types: [] });

    expect(rawLine(POD_LIST_FILES.gpuspec33, 'openb-pod-0527')).toBe('openb-pod-0527,3152,5600,1,1000,V100M16|V100M32|V100M32,BE,Pending,10218024,10218029,');
    expect(spec.get('openb-pod-0527')).toMatchObject({
      phase: 'Pending',
      scheduledTime: null,
      holdSeconds: 5,
      stage: { pool: 'gpu:any', resources: { gpu: { count: 1, types: ['v100m16', 'v100m32'] } } },
    });

    expect(rawLine(POD_LIST_FILES.default, 'openb-pod-0129')).toBe('openb-pod-0129,12000,24576,1,1000,,Guaranteed,Running,10035396,10036353,10035396');
    expect(def.get('openb-pod-0129')?.stage.priority).toBe(QOS_PRIORITY.Guaranteed);
  });
});
