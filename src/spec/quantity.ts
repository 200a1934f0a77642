/**
 * Resource quantities as people write them, in the Kubernetes spelling that ML platform users
 * already know: CPUs as a number or millicores ("500m"), memory in bytes or with a binary or
 * decimal suffix ("2Gi", "512Mi", "1G"). Everything inside Gantry is integer millicores and bytes.
 */
const MEMORY_SUFFIX: Record<string, number> = {
  '': 1,
  k: 1e3,
  K: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
  Ti: 1024 ** 4,
};

export class QuantityError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'QuantityError';
  }
}

export function parseCpuMillis(value: number | string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value <= 0) throw new QuantityError(`CPU must be a positive number, got ${value}`);
    return Math.round(value * 1000);
  }
  const m = /^\s*(\d+(?:\.\d+)?)(m?)\s*$/.exec(value);
  if (!m) throw new QuantityError(`"${value}" is not a CPU quantity (use a number like 2 or 0.5, or millicores like 500m)`);
  const n = Number(m[1]);
  const millis = m[2] === 'm' ? Math.round(n) : Math.round(n * 1000);
  if (millis <= 0) throw new QuantityError(`CPU must be positive, got "${value}"`);
  return millis;
}

export function parseMemoryBytes(value: number | string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value <= 0) throw new QuantityError(`memory must be a positive number of bytes, got ${value}`);
    return Math.round(value);
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kKMGT]i?|)\s*$/.exec(value);
  const mult = m ? MEMORY_SUFFIX[m[2] ?? ''] : undefined;
  if (!m || mult === undefined) {
    throw new QuantityError(`"${value}" is not a memory quantity (use bytes or a suffix: Ki, Mi, Gi, Ti, k, M, G, T)`);
  }
  const bytes = Math.round(Number(m[1]) * mult);
  if (bytes <= 0) throw new QuantityError(`memory must be positive, got "${value}"`);
  return bytes;
}

export function formatCpu(millis: number): string {
  return millis % 1000 === 0 ? String(millis / 1000) : `${millis}m`;
}

export function formatMemory(bytes: number): string {
  for (const [suffix, mult] of [
    ['Ti', 1024 ** 4],
    ['Gi', 1024 ** 3],
    ['Mi', 1024 ** 2],
    ['Ki', 1024],
  ] as const) {
    if (bytes >= mult) {
      const v = bytes / mult;
      return `${Number.isInteger(v) ? v : v.toFixed(1)}${suffix}`;
    }
  }
  return `${bytes}`;
}
