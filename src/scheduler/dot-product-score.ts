import { freeGpuMilli, requestGpuMilli, type ShareMachine, type ShareRequest } from './gpu-share.js';

/**
 * The paper's DotProd policy (Tetris's alignment, as the FGD simulator runs it: one GPU dimension,
 * the machine's free thousandths summed, each dimension over the largest machine's): points =
 * trunc(100 × (1 − (cpuFree·cpu + gpuFree·gpu) / 2)), higher is better. The smaller the dot
 * product of what is free and what is asked, the better: the request goes where little of what it
 * needs is left. Computed in the simulator's order of float operations, so its ties are its ties.
 */
export function dotProductPoints(m: ShareMachine, r: ShareRequest, maxCpuMillis: number, maxGpuMilli: number): number {
  const inner = 0 + (m.cpuMillisFree / maxCpuMillis) * (r.cpuMillis / maxCpuMillis) + (freeGpuMilli(m) / maxGpuMilli) * (requestGpuMilli(r) / maxGpuMilli);
  return Math.trunc(100 * (1 - inner / 2));
}
