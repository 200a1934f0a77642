import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Type, type Static } from 'typebox';
import { parse } from 'yaml';
import { parsePools, type PoolTemplate } from '../autoscale/pool-template.js';
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
// `pools:` is checked whole by parsePools (src/autoscale/pool-template.ts), with its own paths.
const ClusterFileSchema = Type.Object(
  { machines: Type.Optional(Type.Array(MachineEntry, { minItems: 1, maxItems: 64 })), pools: Type.Optional(Type.Unknown()) },
  { additionalProperties: false },
);
export type ClusterMachine = Static<typeof MachineEntry>;
/** A cluster file read: the machines `gantry up` stands in for, and the pools the autoscaler grows and shrinks (docs/autoscaling.md). */
export interface ClusterFile {
  machines: ClusterMachine[];
  pools: PoolTemplate[];
}

/**
 * Reads a cluster file: `machines:` (at least one), `pools:` (autoscaled, issue 30), or both.
 * Every problem is a ValidationError at `file#/path`.
 */
export function parseClusterFile(file: string): ClusterFile {
  let doc: unknown;
  try {
    doc = parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ValidationError([{ path: file, message: errorText(err) }]);
  }
  const issues = schemaIssues(ClusterFileSchema, doc);
  if (issues.length) throw new ValidationError(issues.map((i) => ({ path: `${file}#${i.path || '/'}`, message: i.message })));
  const read = doc as Static<typeof ClusterFileSchema>;
  if (read.machines === undefined && read.pools === undefined)
    throw new ValidationError([{ path: `${file}#/`, message: 'a cluster file lists machines: (at least one), pools: (autoscaled), or both' }]);
  const pools = read.pools === undefined ? [] : parsePools(read.pools, `${file}#/pools`);
  // A command provider's executable, when relative, is the cluster file's neighbour (as an include
  // is), not the server's working directory's, which changes with how it was started.
  for (const p of pools) if (p.autoscale.command !== null) p.autoscale.command = resolve(dirname(file), p.autoscale.command);
  const cluster: ClusterFile = { machines: read.machines ?? [], pools };
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
  // The autoscaler names a pool's machines `<pool>-<n>` (autoscaleStart); a listed machine of such
  // a name would be taken for the pool's, or the pool's for it.
  cluster.pools.forEach((p, i) => {
    const clash = cluster.machines.find((m) => poolMachineName(p.name, m.name));
    if (clash)
      throw new ValidationError([
        { path: `${file}#/pools/${i}/name`, message: `pool "${p.name}" names its machines ${p.name}-1, ${p.name}-2, …: machine "${clash.name}" would clash` },
      ]);
  });
  return cluster;
}

/** Whether `name` is of the form the autoscaler gives a machine of `pool`: `<pool>-<n>`. */
function poolMachineName(pool: string, name: string): boolean {
  return name.startsWith(`${pool}-`) && /^[0-9]+$/.test(name.slice(pool.length + 1));
}

/** One CPU machine and one GPU machine: real GPUs where nvidia-smi finds them, declared ones otherwise. */
export function defaultCluster(hasRealGpus: boolean): ClusterFile {
  return {
    pools: [],
    machines: [
      { name: 'cpu-1', cpu: 4, memory: '8Gi' },
      hasRealGpus
        ? { name: 'gpu-1', cpu: 8, memory: '32Gi', gpus: 'detect' }
        : { name: 'gpu-1', cpu: 8, memory: '32Gi', gpus: { type: 'h100', count: 4, memory: '80Gi' } },
    ],
  };
}

/**
 * `gantry up --autoscale` with no pool declared: one pool of GPU machines like gpu-1, started on
 * this host by the local provider when GPU stages wait and stopped when idle (docs/autoscaling.md).
 */
export const DEFAULT_POOL = {
  name: 'h100',
  template: { cpu: 8, memory: '32Gi', gpus: { type: 'h100', count: 4, memory: '80Gi' } },
  autoscale: { provider: 'local', min: 0, max: 2, idleSeconds: 300, bootTimeoutSeconds: 120 },
} as const;

/**
 * What `gantry up --autoscale` runs: the cluster's pools, or, with none declared, DEFAULT_POOL,
 * which takes the place of the default cluster's gpu-1 (a cluster file's machines all stay).
 */
export function withDefaultPool(cluster: ClusterFile, fromFile: boolean): ClusterFile {
  if (cluster.pools.length > 0) return cluster;
  const machines = fromFile ? cluster.machines : cluster.machines.filter((m) => !m.gpus);
  const clash = machines.find((m) => poolMachineName(DEFAULT_POOL.name, m.name));
  if (clash)
    throw new ValidationError([
      { path: '--autoscale', message: `the default pool "h100" names its machines h100-1, h100-2, …: machine "${clash.name}" would clash` },
    ]);
  return { machines, pools: parsePools([DEFAULT_POOL], '--autoscale#/pools') };
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
