import type { MachineView } from '../../api/contract/job-view';

type Gpu = MachineView['gpus'][number];

/** Thousandths of the GPU attempts hold; a server before shares says only busy or free. */
function usedMilli(g: Gpu): number {
  return g.usedMilli ?? (g.busy ? 1000 : 0);
}

/** GPUs in use on the machine as an amount: a share counts its part (1.5 for one whole and two quarters). */
export function gpusUsed(m: Pick<MachineView, 'gpus'>): number {
  return m.gpus.reduce((sum, g) => sum + usedMilli(g), 0) / 1000;
}

/** The chip's class: " busy" held whole or shared to the full, " shared" partly held by shares, "" free. */
export function gpuClass(g: Gpu): string {
  const used = usedMilli(g);
  return used === 0 ? '' : used < 1000 ? ' shared' : ' busy';
}

/** "free", "busy", or "0.5 used by shares". */
export function gpuUse(g: Gpu): string {
  const used = usedMilli(g);
  return used === 0 ? 'free' : used < 1000 ? `${used / 1000} used by shares` : 'busy';
}
