import type { MachineView } from './job-view.js';

type Gpu = MachineView['gpus'][number];

/**
 * How much of a machine's GPU attempts hold, as the CLI and the dashboard alike show it (issue
 * 29): thousandths held, 1000 held whole or shared to the full; a server before shares says only
 * busy or free.
 */
export function gpuUsedMilli(g: Gpu): number {
  return g.usedMilli ?? (g.busy ? 1000 : 0);
}

/** GPUs in use on the machine as an amount: a share counts its part (1.5 for one whole and two quarters). */
export function gpusUsed(m: Pick<MachineView, 'gpus'>): number {
  return m.gpus.reduce((sum, g) => sum + gpuUsedMilli(g), 0) / 1000;
}

/**
 * "free", "busy", or for a GPU shares hold part of "0.75 used by shares". A GPU shared to the full
 * shows as busy, like one held whole: for placing a stage they are the same.
 */
export function gpuUseText(g: Gpu): string {
  const used = gpuUsedMilli(g);
  if (used === 0) return 'free';
  return used < 1000 ? `${used / 1000} used by shares` : 'busy';
}
