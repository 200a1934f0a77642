import type { MachineView } from '../../api/contract/job-view';
import { gpuUsedMilli } from '../../api/contract/gpu-use';

/** A GPU chip's class: " busy" held whole or shared to the full, " shared" partly held by shares, "" free. */
export function gpuClass(g: MachineView['gpus'][number]): string {
  const used = gpuUsedMilli(g);
  return used === 0 ? '' : used < 1000 ? ' shared' : ' busy';
}
