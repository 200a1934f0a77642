/**
 * What this machine offers, as the agent registers it: flags where given, detection otherwise.
 * Declared GPUs (`--gpus h100:4`) stand in for real ones on a machine without them, so one laptop
 * can play a GPU cluster; they are marked as declared so nobody mistakes them for hardware.
 */
import os from 'node:os';
import { parseCpuMillis, parseMemoryBytes } from '../../spec/quantity.js';
import { normalizeGpuType } from '../../domain/resources.js';
import { discoverGpus, type GpuInfo } from './gpu-discovery.js';
import type { MigCapabilities } from './mig-capabilities.js';

export interface DetectedGpu {
  index: number;
  uuid: string | null;
  name: string;
  type: string;
  memoryMiB: number | null;
  /** Its `/dev/nvidia<N>` (GpuInfo.deviceMinor); a declared GPU's is its index, whose file the host may not have. */
  deviceMinor: number;
  /** A MIG device's capability files, or why they are unknown (GpuInfo.migCaps); absent on a whole or declared GPU. */
  migCaps?: MigCapabilities;
}

export interface DetectedMachine {
  name: string;
  cpuMillis: number;
  memoryBytes: number;
  gpus: DetectedGpu[];
  gpusDeclared: boolean;
  region: string | null;
  labels: Record<string, string>;
}

export interface DetectMachineOptions {
  cpu?: string | number;
  memory?: string | number;
  /** "TYPE:N", e.g. "h100:4"; "none" declares that the machine has no GPUs even if it has some. */
  gpus?: string;
  region?: string;
  labels?: Record<string, string>;
  name?: string;
  /** Seam for tests; defaults to nvidia-smi. */
  discover?: () => Promise<GpuInfo[] | null>;
}

export class MachineConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MachineConfigError';
  }
}

/** The server's rule for machine names (RegisterRequest.name). */
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const LABEL_KEY = /^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$/;
const GPU_TYPE = /^[a-z0-9][a-z0-9._-]*$/;
const MAX_GPUS = 64;

export async function detectMachine(opts: DetectMachineOptions = {}): Promise<DetectedMachine> {
  const name = opts.name !== undefined ? checkName(opts.name) : hostnameAsName(os.hostname());
  const cpuMillis = opts.cpu !== undefined ? parseCpuMillis(opts.cpu) : os.availableParallelism() * 1000;
  const memoryBytes = opts.memory !== undefined ? parseMemoryBytes(opts.memory) : os.totalmem();
  const region = opts.region !== undefined && opts.region.trim() !== '' ? opts.region.trim() : null;
  const labels = checkLabels(opts.labels ?? {});

  if (opts.gpus !== undefined) {
    const { type, count, memoryMiB } = parseGpuDeclaration(opts.gpus);
    const gpus = Array.from({ length: count }, (_, index) => ({ index, uuid: null, name: `declared ${type}`, type, memoryMiB, deviceMinor: index }));
    return { name, cpuMillis, memoryBytes, gpus, gpusDeclared: true, region, labels };
  }
  const found = (await (opts.discover ?? discoverGpus)()) ?? [];
  const gpus = found.map((g) => ({ ...g, type: normalizeGpuType(g.type) }));
  return { name, cpuMillis, memoryBytes, gpus, gpusDeclared: false, region, labels };
}

/**
 * `--gpus TYPE:COUNT[:MEMORY]`: declared GPUs, each with MEMORY (`80Gi`) where given, so that
 * stages bounding GPU memory (`gpu: {memory: 10Gi}`) can be tried on a machine without GPUs;
 * without it their memory is unknown and such stages never go there.
 */
export function parseGpuDeclaration(spec: string): { type: string; count: number; memoryMiB: number | null } {
  const s = spec.trim();
  if (s.toLowerCase() === 'none') return { type: 'none', count: 0, memoryMiB: null };
  const m = /^([^:\s]+):(\d+)(?::([^:\s]+))?$/.exec(s);
  if (!m) throw new MachineConfigError(`--gpus "${spec}" is not TYPE:COUNT or TYPE:COUNT:MEMORY (for example h100:4 or h100:4:80Gi), or "none"`);
  const type = normalizeGpuType(m[1]!);
  const count = Number(m[2]);
  if (!GPU_TYPE.test(type)) throw new MachineConfigError(`--gpus: GPU type "${m[1]}" may only hold letters, digits, ".", "_" and "-"`);
  if (count < 1 || count > MAX_GPUS) throw new MachineConfigError(`--gpus: count must be 1 to ${MAX_GPUS}, got ${count}`);
  let memoryMiB: number | null = null;
  if (m[3] !== undefined) {
    let bytes: number;
    try {
      bytes = parseMemoryBytes(m[3]);
    } catch {
      throw new MachineConfigError(`--gpus: GPU memory "${m[3]}" is not a quantity (for example 80Gi)`);
    }
    // nvidia-smi reports MiB; a declared GPU reports the same unit.
    memoryMiB = Math.floor(bytes / 1024 ** 2);
    if (memoryMiB < 1) throw new MachineConfigError(`--gpus: GPU memory must be at least 1Mi, got ${m[3]}`);
  }
  return { type, count, memoryMiB };
}

/** `--label k=v` flags; a key given twice is an error rather than a silent last-wins. */
export function parseLabels(list: string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const item of list) {
    const eq = item.indexOf('=');
    if (eq < 0) throw new MachineConfigError(`label "${item}" must be key=value`);
    const key = item.slice(0, eq).trim();
    const value = item.slice(eq + 1).trim();
    if (Object.hasOwn(labels, key)) throw new MachineConfigError(`label "${key}" is given twice`);
    checkLabel(key, value);
    labels[key] = value;
  }
  return labels;
}

function checkLabels(labels: Record<string, string>): Record<string, string> {
  for (const [k, v] of Object.entries(labels)) checkLabel(k, v);
  return { ...labels };
}

function checkLabel(key: string, value: string): void {
  if (key === '') throw new MachineConfigError(`label "=${value}" has an empty key`);
  if (!LABEL_KEY.test(key)) {
    throw new MachineConfigError(`label key "${key}" may only hold letters, digits, ".", "_", "-" and "/", and must start and end with a letter or digit`);
  }
  if (typeof value !== 'string') throw new MachineConfigError(`label "${key}" must have a string value`);
}

function checkName(name: string): string {
  if (!NAME.test(name) || name.length > 200) {
    throw new MachineConfigError(`machine name "${name}" may only hold letters, digits, ".", "_" and "-", and must start with a letter or digit`);
  }
  return name;
}

/** A hostname is not always a valid machine name (underscores are, odd characters are not). */
function hostnameAsName(host: string): string {
  const cleaned = host
    .replace(/[^A-Za-z0-9._-]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 200);
  return cleaned !== '' ? cleaned : 'machine';
}
