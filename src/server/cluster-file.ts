import { readFileSync } from 'node:fs';
import { Type, type Static } from 'typebox';
import { parse } from 'yaml';
import { parseCpuMillis, parseMemoryBytes } from '../spec/quantity.js';
import { schemaIssues } from '../spec/schema-issues.js';
import { ValidationError } from '../spec/validation-error.js';
import { errorText } from '../lib/error-text.js';

/**
 * The machines `gantry up` starts local agents for: stand-ins for a CPU cluster and a GPU
 * cluster on one host. Capacities are declared (the scheduler believes them); GPUs listed here
 * are marked `declared` everywhere they are shown. A machine without `gpus` on a host where
 * nvidia-smi finds GPUs may set `gpus: detect` to use the real ones.
 */
const StringMap = Type.Unsafe<Record<string, string>>(Type.Object({}, { additionalProperties: Type.String() }));
const MachineEntry = Type.Object(
  {
    name: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$', maxLength: 100 }),
    cpu: Type.Optional(Type.Union([Type.Number(), Type.String()])),
    memory: Type.Optional(Type.Union([Type.Number(), Type.String()])),
    gpus: Type.Optional(
      Type.Union([
        Type.Literal('detect'),
        Type.Object(
          {
            type: Type.String({ minLength: 1 }),
            count: Type.Integer({ minimum: 1, maximum: 64 }),
            /** Each declared GPU's memory ("80Gi"): stages that bound GPU memory go only where it is known. */
            memory: Type.Optional(Type.Union([Type.Number(), Type.String()])),
          },
          { additionalProperties: false },
        ),
      ]),
    ),
    region: Type.Optional(Type.String()),
    labels: Type.Optional(StringMap),
  },
  { additionalProperties: false },
);
export const ClusterFileSchema = Type.Object({ machines: Type.Array(MachineEntry, { minItems: 1, maxItems: 64 }) }, { additionalProperties: false });
export type ClusterFile = Static<typeof ClusterFileSchema>;
export type ClusterMachine = Static<typeof MachineEntry>;

export function parseClusterFile(file: string): ClusterFile {
  let doc: unknown;
  try {
    doc = parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ValidationError([{ path: file, message: errorText(err) }]);
  }
  const issues = schemaIssues(ClusterFileSchema, doc);
  if (issues.length) throw new ValidationError(issues.map((i) => ({ path: `${file}#${i.path || '/'}`, message: i.message })));
  const cluster = doc as ClusterFile;
  const names = new Set<string>();
  cluster.machines.forEach((m, i) => {
    if (names.has(m.name)) throw new ValidationError([{ path: `${file}#/machines/${i}/name`, message: `duplicate machine name "${m.name}"` }]);
    names.add(m.name);
    try {
      if (m.cpu !== undefined) parseCpuMillis(m.cpu);
      if (m.memory !== undefined) parseMemoryBytes(m.memory);
    } catch (err) {
      throw new ValidationError([{ path: `${file}#/machines/${i}`, message: errorText(err) }]);
    }
    if (m.gpus && m.gpus !== 'detect' && m.gpus.memory !== undefined) {
      try {
        if (parseMemoryBytes(m.gpus.memory) < 1024 ** 2) throw new Error(`GPU memory must be at least 1Mi, got ${m.gpus.memory}`);
      } catch (err) {
        throw new ValidationError([{ path: `${file}#/machines/${i}/gpus/memory`, message: errorText(err) }]);
      }
    }
  });
  return cluster;
}

/** One CPU machine and one GPU machine: real GPUs where nvidia-smi finds them, declared ones otherwise. */
export function defaultCluster(hasRealGpus: boolean): ClusterFile {
  return {
    machines: [
      { name: 'cpu-1', cpu: 4, memory: '8Gi' },
      hasRealGpus
        ? { name: 'gpu-1', cpu: 8, memory: '32Gi', gpus: 'detect' }
        : { name: 'gpu-1', cpu: 8, memory: '32Gi', gpus: { type: 'h100', count: 4, memory: '80Gi' } },
    ],
  };
}

/** The `gantry agent` arguments that make a local agent stand in for this machine. */
export function agentArgs(m: ClusterMachine, serverUrl: string, dataDir: string): string[] {
  const args = ['agent', '--server', serverUrl, '--name', m.name, '--data-dir', dataDir, '--exit-with-parent'];
  if (m.cpu !== undefined) args.push('--cpu', String(m.cpu));
  if (m.memory !== undefined) args.push('--memory', String(m.memory));
  if (m.gpus && m.gpus !== 'detect') args.push('--gpus', `${m.gpus.type}:${m.gpus.count}${m.gpus.memory !== undefined ? `:${m.gpus.memory}` : ''}`);
  if (m.region) args.push('--region', m.region);
  for (const [k, v] of Object.entries(m.labels ?? {})) args.push('--label', `${k}=${v}`);
  return args;
}
