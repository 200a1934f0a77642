import { Type, type Static } from 'typebox';
import { normalizeGpuType } from '../domain/resources.js';
import type { MachineView } from '../scheduler/snapshot.js';
import { formatCpu, formatMemory, parseCpuMillis, parseMemoryBytes } from '../spec/quantity.js';
import { schemaIssues } from '../spec/schema-issues.js';
import { ValidationError, type ValidationIssue } from '../spec/validation-error.js';
import { errorText } from '../lib/error-text.js';

/**
 * An autoscaled pool as the cluster file's `pools:` section declares it (issue 30): the shape of
 * the machines a provider can start (a template) and the bounds the autoscaler keeps. Parsed once
 * into integer millicores and bytes, GPU types lower case, as the scheduler compares them.
 */
export const ScaleProvider = {
  /** Starts and stops `gantry agent` processes on this host with the template's declared resources. */
  local: 'local',
  /** Runs an executable with a JSON request on stdin and reads the machines it started from stdout. */
  command: 'command',
} as const;
export type ScaleProvider = (typeof ScaleProvider)[keyof typeof ScaleProvider];

export interface MachineTemplate {
  cpuMillis: number;
  memoryBytes: number;
  /**
   * Null: a CPU machine. `memoryBytes`: each GPU's memory, where the file declares it (absent:
   * unknown, so a stage bounding GPU memory is not placed there, as on a declared machine without it).
   */
  gpus: { type: string; count: number; memoryBytes?: number } | null;
  region: string | null;
  labels: Record<string, string>;
}

export interface PoolAutoscale {
  provider: ScaleProvider;
  /** The executable of the `command` provider (absent for `local`). */
  command: string | null;
  min: number;
  max: number;
  /** A machine idle this long is cordoned, drained and released. */
  idleSeconds: number;
  /** A machine that has not joined this long after its start is failed and released. */
  bootTimeoutSeconds: number;
  /** At most this many starts in one autoscaler interval (absent in the file: no limit beyond max). */
  maxStartsPerInterval: number | null;
  /**
   * Idle machines kept ready ahead of demand (over-provisioning; absent in the file: 0): a stage
   * that comes finds room at once instead of waiting a boot. Never above max.
   */
  spareMachines: number;
}

export interface PoolTemplate {
  name: string;
  template: MachineTemplate;
  autoscale: PoolAutoscale;
}

const NAME = '^[A-Za-z0-9][A-Za-z0-9._-]*$';
const StringMap = Type.Unsafe<Record<string, string>>(Type.Object({}, { additionalProperties: Type.String() }));
const Quantity = Type.Union([Type.Number(), Type.String()]);
const PoolEntry = Type.Object(
  {
    name: Type.String({ pattern: NAME, maxLength: 60 }),
    template: Type.Object(
      {
        cpu: Quantity,
        memory: Quantity,
        gpus: Type.Optional(
          Type.Object(
            {
              type: Type.String({ minLength: 1 }),
              count: Type.Integer({ minimum: 1, maximum: 64 }),
              /** Each GPU's memory ("80Gi"), as a cluster file's machines declare it. */
              memory: Type.Optional(Quantity),
            },
            { additionalProperties: false },
          ),
        ),
        region: Type.Optional(Type.String({ minLength: 1 })),
        labels: Type.Optional(StringMap),
      },
      { additionalProperties: false },
    ),
    autoscale: Type.Object(
      {
        provider: Type.Union([Type.Literal(ScaleProvider.local), Type.Literal(ScaleProvider.command)]),
        command: Type.Optional(Type.String({ minLength: 1 })),
        min: Type.Integer({ minimum: 0, maximum: 10000 }),
        max: Type.Integer({ minimum: 1, maximum: 10000 }),
        idleSeconds: Type.Integer({ minimum: 0 }),
        bootTimeoutSeconds: Type.Integer({ minimum: 1 }),
        maxStartsPerInterval: Type.Optional(Type.Integer({ minimum: 1 })),
        spareMachines: Type.Optional(Type.Integer({ minimum: 0, maximum: 10000 })),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);
const PoolsSchema = Type.Array(PoolEntry, { maxItems: 100 });
type PoolEntry = Static<typeof PoolEntry>;

/**
 * The `pools:` section, validated whole: every problem found, each with the path of the field
 * (`/pools/0/autoscale/max`), so an operator fixes the file in one go. `path` is where the section
 * sits (a file name and `#/pools` when read from a file). Throws ValidationError.
 */
export function parsePools(value: unknown, path = '/pools'): PoolTemplate[] {
  const issues: ValidationIssue[] = schemaIssues(PoolsSchema, value).map((i) => ({ path: `${path}${i.path}`, message: i.message }));
  if (issues.length) throw new ValidationError(issues);
  const entries = value as PoolEntry[];
  const names = new Set<string>();
  const out: PoolTemplate[] = [];
  entries.forEach((e, i) => {
    const at = `${path}/${i}`;
    if (names.has(e.name)) issues.push({ path: `${at}/name`, message: `duplicate pool name "${e.name}"` });
    names.add(e.name);
    const quantity = (field: 'cpu' | 'memory', parse: (v: number | string) => number): number => {
      try {
        return parse(e.template[field]);
      } catch (err) {
        issues.push({ path: `${at}/template/${field}`, message: errorText(err) });
        return 0;
      }
    };
    const cpuMillis = quantity('cpu', parseCpuMillis);
    const memoryBytes = quantity('memory', parseMemoryBytes);
    const a = e.autoscale;
    if (a.min > a.max) issues.push({ path: `${at}/autoscale/min`, message: `min (${a.min}) is above max (${a.max})` });
    if ((a.spareMachines ?? 0) > a.max)
      issues.push({ path: `${at}/autoscale/spareMachines`, message: `spareMachines (${a.spareMachines}) is above max (${a.max})` });
    if (a.provider === ScaleProvider.command && a.command === undefined) {
      issues.push({ path: `${at}/autoscale/command`, message: 'provider "command" needs the executable to run (command: /path/to/script)' });
    }
    if (a.provider === ScaleProvider.local && a.command !== undefined) {
      issues.push({ path: `${at}/autoscale/command`, message: 'provider "local" runs gantry agent itself and takes no command' });
    }
    const gpuType = e.template.gpus ? normalizeGpuType(e.template.gpus.type) : '';
    if (e.template.gpus && gpuType === '') issues.push({ path: `${at}/template/gpus/type`, message: 'GPU type is blank' });
    let gpuMemoryBytes: number | undefined;
    const gpuMemory = e.template.gpus?.memory;
    if (gpuMemory !== undefined) {
      // The cluster file's rule for a machine's gpus.memory (server/cluster-file.ts): below 1Mi is a typo, not a GPU.
      try {
        gpuMemoryBytes = parseMemoryBytes(gpuMemory);
        if (gpuMemoryBytes < 1024 ** 2) throw new Error(`GPU memory must be at least 1Mi, got ${gpuMemory}`);
      } catch (err) {
        issues.push({ path: `${at}/template/gpus/memory`, message: errorText(err) });
      }
    }
    out.push({
      name: e.name,
      template: {
        cpuMillis,
        memoryBytes,
        gpus: e.template.gpus
          ? { type: gpuType, count: e.template.gpus.count, ...(gpuMemoryBytes !== undefined ? { memoryBytes: gpuMemoryBytes } : {}) }
          : null,
        region: e.template.region ?? null,
        labels: { ...(e.template.labels ?? {}) },
      },
      autoscale: {
        provider: a.provider,
        command: a.command ?? null,
        min: a.min,
        max: a.max,
        idleSeconds: a.idleSeconds,
        bootTimeoutSeconds: a.bootTimeoutSeconds,
        maxStartsPerInterval: a.maxStartsPerInterval ?? null,
        spareMachines: a.spareMachines ?? 0,
      },
    });
  });
  if (issues.length) throw new ValidationError(issues);
  return out;
}

/**
 * A machine of the template as the scheduler would see it once joined: ready, in service, idle.
 * What the autoscaler's simulated pass places on (hypothetical machines, and machines already
 * starting), and what the replay adds when a simulated boot ends.
 */
export function templateMachine(t: MachineTemplate, id: string, name = id): MachineView {
  return {
    id,
    name,
    health: 'ready',
    scheduling: 'eligible',
    region: t.region,
    labels: { ...t.labels },
    cpuMillisTotal: t.cpuMillis,
    memoryBytesTotal: t.memoryBytes,
    cpuMillisFree: t.cpuMillis,
    memoryBytesFree: t.memoryBytes,
    gpus: Array.from({ length: t.gpus?.count ?? 0 }, (_, index) => ({
      index,
      type: t.gpus!.type,
      free: true,
      freeMilli: 1000,
      // As a joined machine reports a declared GPU's memory: known where the template says, else unknown.
      ...(t.gpus?.memoryBytes !== undefined ? { memoryBytesTotal: t.gpus.memoryBytes, memoryBytesFree: t.gpus.memoryBytes } : {}),
    })),
    heldAttempts: 0,
  };
}

/** "8 × h100 (80Gi), 32 CPU, 256Gi": a template in words, for reasons. */
export function describeTemplate(t: MachineTemplate): string {
  const gpuMemory = t.gpus?.memoryBytes !== undefined ? ` (${formatMemory(t.gpus.memoryBytes)})` : '';
  const gpus = t.gpus ? `${t.gpus.count} × ${t.gpus.type}${gpuMemory}, ` : '';
  return `${gpus}${formatCpu(t.cpuMillis)} CPU, ${formatMemory(t.memoryBytes)}`;
}

/** A template as the cluster file writes one (quantities as people write them): what a provider passes on. */
export interface TemplateEntry {
  cpu: string;
  memory: string;
  gpus?: { type: string; count: number; memory?: string };
  region?: string;
  labels: Record<string, string>;
}

/**
 * The template in the cluster file's spelling ("32", "256Gi", gpus.memory "80Gi"): the `command`
 * provider's request carries it and the `local` provider's agent flags are made from it. A size
 * that formatMemory would round ("953.7Mi" for 1G) is written in bytes instead, so a machine
 * started from it offers exactly what the autoscaler simulated.
 */
export function templateEntry(t: MachineTemplate): TemplateEntry {
  const memory = (bytes: number): string => {
    const text = formatMemory(bytes);
    return parseMemoryBytes(text) === bytes ? text : String(bytes);
  };
  return {
    cpu: formatCpu(t.cpuMillis),
    memory: memory(t.memoryBytes),
    ...(t.gpus
      ? { gpus: { type: t.gpus.type, count: t.gpus.count, ...(t.gpus.memoryBytes !== undefined ? { memory: memory(t.gpus.memoryBytes) } : {}) } }
      : {}),
    ...(t.region !== null ? { region: t.region } : {}),
    labels: { ...t.labels },
  };
}
