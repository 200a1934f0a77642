import { normalizeGpuType } from './resources.js';

/** A machine's pool, as stages name theirs: `gpu:<type>` of its first GPU type, else `cpu`. */
export function machinePool(m: { gpus: readonly { type: string }[] }): string {
  return m.gpus.length ? `gpu:${normalizeGpuType(m.gpus[0]!.type)}` : 'cpu';
}
