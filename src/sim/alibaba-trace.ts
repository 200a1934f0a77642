/**
 * The Alibaba GPU cluster trace (2023, "openb", from the FGD paper, USENIX ATC '23) as scheduler
 * input; `trace-replay.ts` runs the real `planPlacements` over it.
 *
 * - `parseNodeList` / `parsePodList` are pure: CSV text in, `MachineView[]` / `TracePod[]` out.
 * - `readNodeList` / `readPodList` / `loadAlibabaTrace` are the thin fs wrappers.
 *
 * Columns are described in `../shared/traces/alibaba-gpu-2023/README.md`. The files have no
 * quoted fields; the parser refuses a quote rather than guess.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { normalizeGpuType, poolOf, type Resources } from '../domain/resources.js';
import type { MachineView, QueuedStage } from '../scheduler/snapshot.js';

// ---------------------------------------------------------------- files

/** Where the trace lives, relative to the repository root (CI clones `../shared` beside the repo). */
export const ALIBABA_TRACE_RELATIVE_DIR = '../shared/traces/alibaba-gpu-2023';
export const NODE_LIST_FILE = 'openb_node_list_all_node.csv';
export const POD_LIST_FILES = {
  default: 'openb_pod_list_default.csv',
  gpuspec33: 'openb_pod_list_gpuspec33.csv',
} as const;
export type PodListName = keyof typeof POD_LIST_FILES;

/** The trace directory for this checkout (this file sits two levels below the root, in src/ or dist/). */
export function defaultAlibabaTraceDir(): string {
  return fileURLToPath(new URL(`../../${ALIBABA_TRACE_RELATIVE_DIR}/`, import.meta.url));
}

/** True when the node list and both pod lists are present in `dir`. */
export function hasAlibabaTrace(dir: string = defaultAlibabaTraceDir()): boolean {
  return [NODE_LIST_FILE, ...Object.values(POD_LIST_FILES)].every((f) => existsSync(join(dir, f)));
}

export function readNodeList(dir: string = defaultAlibabaTraceDir()): MachineView[] {
  return parseNodeList(readFileSync(join(dir, NODE_LIST_FILE), 'utf8'));
}

export function readPodList(list: PodListName, dir: string = defaultAlibabaTraceDir()): TracePod[] {
  return parsePodList(readFileSync(join(dir, POD_LIST_FILES[list]), 'utf8'));
}

export function loadAlibabaTrace(list: PodListName = 'default', dir: string = defaultAlibabaTraceDir()): { machines: MachineView[]; pods: TracePod[] } {
  return { machines: readNodeList(dir), pods: readPodList(list, dir) };
}

// ---------------------------------------------------------------- CSV

interface CsvRow {
  /** 1-based line number in the file, for error messages. */
  line: number;
  fields: Record<string, string>;
}

function parseCsv(text: string, required: readonly string[], what: string): CsvRow[] {
  const lines = text.split(/\r?\n/);
  const header = (lines[0] ?? '').split(',').map((h) => h.trim());
  for (const col of required) {
    if (!header.includes(col)) throw new Error(`${what}: missing column "${col}" (header: ${lines[0] ?? ''})`);
  }
  const rows: CsvRow[] = [];
  for (let i = 1; i < lines.length; i++) {
    const raw = lines[i] ?? '';
    if (raw.trim() === '') continue;
    if (raw.includes('"')) throw new Error(`${what} line ${i + 1}: quoted fields are not supported`);
    const cells = raw.split(',');
    if (cells.length !== header.length) {
      throw new Error(`${what} line ${i + 1}: ${cells.length} fields, header has ${header.length}`);
    }
    const fields: Record<string, string> = {};
    header.forEach((h, j) => (fields[h] = (cells[j] ?? '').trim()));
    rows.push({ line: i + 1, fields });
  }
  return rows;
}

/** pandas wrote missing values as "" (and the README shows "nan"). */
function isMissing(v: string): boolean {
  return v === '' || v.toLowerCase() === 'nan';
}

function field(row: CsvRow, col: string): string {
  return row.fields[col] ?? '';
}

function intField(row: CsvRow, col: string, what: string): number {
  const v = field(row, col);
  if (!/^-?\d+$/.test(v)) throw new Error(`${what} line ${row.line}: ${col} is not an integer: "${v}"`);
  return Number(v);
}

function optionalIntField(row: CsvRow, col: string, what: string): number | null {
  return isMissing(field(row, col)) ? null : intField(row, col, what);
}

const MiB = 1024 * 1024;

// ---------------------------------------------------------------- nodes

/**
 * The node list as machines: all `ready` and idle, GPUs indexed 0..n-1 with the model in lower
 * case ("V100M16" -> "v100m16"), memory MiB -> bytes, no region, no labels. id = name = `sn`.
 */
export function parseNodeList(csv: string): MachineView[] {
  const what = NODE_LIST_FILE;
  return parseCsv(csv, ['sn', 'cpu_milli', 'memory_mib', 'gpu', 'model'], what).map((row) => {
    const sn = field(row, 'sn');
    if (sn === '') throw new Error(`${what} line ${row.line}: empty sn`);
    const cpu = intField(row, 'cpu_milli', what);
    const mem = intField(row, 'memory_mib', what) * MiB;
    const gpuCount = intField(row, 'gpu', what);
    const model = field(row, 'model');
    if (gpuCount > 0 && isMissing(model)) throw new Error(`${what} line ${row.line}: ${gpuCount} GPUs without a model`);
    const type = gpuCount > 0 ? normalizeGpuType(model) : '';
    return {
      id: sn,
      name: sn,
      health: 'ready',
      scheduling: 'eligible',
      region: null,
      labels: {},
      cpuMillisTotal: cpu,
      memoryBytesTotal: mem,
      cpuMillisFree: cpu,
      memoryBytesFree: mem,
      gpus: Array.from({ length: gpuCount }, (_, index) => ({ index, type, free: true })),
    };
  });
}

// ---------------------------------------------------------------- pods

/**
 * Trace QoS -> Gantry priority (higher is scheduled first):
 * - Guaranteed 3: Kubernetes' strongest class (requests = limits), never the first to be evicted.
 * - LS 2: Alibaba's latency-sensitive (online serving) pods.
 * - Burstable 1: requests below limits.
 * - BE 0: best effort, batch work that can wait.
 * Any other value is an error: a new class should be placed in this order on purpose.
 */
export const QOS_PRIORITY = {
  Guaranteed: 3,
  LS: 2,
  Burstable: 1,
  BE: 0,
} as const satisfies Record<string, number>;
export type TraceQos = keyof typeof QOS_PRIORITY;

function qosPriority(qos: string): number | undefined {
  return Object.hasOwn(QOS_PRIORITY, qos) ? QOS_PRIORITY[qos as TraceQos] : undefined;
}

export interface TracePod {
  name: string;
  qos: string;
  /** Phase at the end of the trace: Running, Succeeded, Failed, Pending. */
  phase: string;
  /** Seconds since the trace start. */
  creationTime: number;
  deletionTime: number;
  /** Null for the pods that were still Pending in production. */
  scheduledTime: number | null;
  /** The trace's GPU share per pod: 1000 = whole GPUs; below 1000 only with num_gpu = 1. */
  gpuMilli: number;
  /** num_gpu = 1 and gpu_milli < 1000: a GPU-sharing pod, given one whole GPU here. */
  fractionalGpu: boolean;
  /**
   * How long the pod holds its resources once placed, in seconds: deletion_time - scheduled_time,
   * as it ran in production. Pods that never ran in production (Pending, no scheduled_time) hold
   * for deletion_time - creation_time, the time they existed in the trace.
   */
  holdSeconds: number;
  /** The pod as Gantry queues it: stageId = jobId = stageName = the pod name. */
  stage: QueuedStage;
}

/**
 * The pod list as queued stages: pool per `poolOf`, CPU millis, memory MiB -> bytes, priority per
 * `QOS_PRIORITY`, readySince = creation_time in ms. GPU pods get `{count: num_gpu, types}` with
 * `gpu_spec` split on "|", lower-cased and de-duplicated (empty spec: any type).
 *
 * Fractional GPUs: Gantry allocates whole devices and has no GPU sharing, so a pod asking for a
 * share of one GPU (num_gpu = 1, gpu_milli < 1000; 3,078 of the 8,152 pods) is counted as one whole
 * GPU. The replay therefore packs the cluster less densely than production did.
 */
export function parsePodList(csv: string): TracePod[] {
  const what = 'pod list';
  const cols = ['name', 'cpu_milli', 'memory_mib', 'num_gpu', 'gpu_milli', 'gpu_spec', 'qos', 'pod_phase', 'creation_time', 'deletion_time', 'scheduled_time'];
  return parseCsv(csv, cols, what).map((row) => {
    const name = field(row, 'name');
    if (name === '') throw new Error(`${what} line ${row.line}: empty name`);
    const numGpu = intField(row, 'num_gpu', what);
    const gpuMilli = intField(row, 'gpu_milli', what);
    const spec = field(row, 'gpu_spec');
    const qos = field(row, 'qos');
    const priority = qosPriority(qos);
    if (priority === undefined) throw new Error(`${what} line ${row.line}: unknown qos "${qos}"`);
    const creationTime = intField(row, 'creation_time', what);
    const deletionTime = intField(row, 'deletion_time', what);
    const scheduledTime = optionalIntField(row, 'scheduled_time', what);

    const types = isMissing(spec)
      ? []
      : [
          ...new Set(
            spec
              .split('|')
              .map(normalizeGpuType)
              .filter((t) => t !== ''),
          ),
        ];
    const resources: Resources = {
      cpuMillis: intField(row, 'cpu_milli', what),
      memoryBytes: intField(row, 'memory_mib', what) * MiB,
      // A fractional pod (num_gpu 1, gpu_milli < 1000) asks for count 1: one whole GPU.
      gpu: numGpu > 0 ? { count: numGpu, types } : null,
    };
    return {
      name,
      qos,
      phase: field(row, 'pod_phase'),
      creationTime,
      deletionTime,
      scheduledTime,
      gpuMilli,
      fractionalGpu: numGpu === 1 && gpuMilli < 1000,
      holdSeconds: Math.max(0, deletionTime - (scheduledTime ?? creationTime)),
      stage: {
        stageId: name,
        jobId: name,
        stageName: name,
        pool: poolOf(resources),
        priority,
        readySince: creationTime * 1000,
        resources,
        placement: { region: null, labels: {} },
      },
    };
  });
}
