/**
 * What an attempt's GPUs become on the machine (docs/machines.md, "GPUs on the machine"): the
 * CUDA_VISIBLE_DEVICES it sees, the device files the devices cgroup and the sandbox let it open,
 * and, for a share of a GPU under MPS, the variables that bound it.
 */
import type { AssignmentWire } from '../../api/contract/agent-protocol.js';
import type { GpuSharingMode } from '../../api/contract/containment.js';
import type { DetectedGpu } from '../machine/machine-detect.js';

export interface AttemptGpus {
  /** CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and, for a share under MPS, CUDA_MPS_*. */
  env: Record<string, string>;
  /** The N of each `/dev/nvidia<N>` it may open, once each: a MIG instance's is its parent's. */
  deviceMinors: number[];
  /**
   * The minors of the `/dev/nvidia-caps/nvidia-cap<M>` it may open: its MIG devices' (none for
   * whole GPUs), or `all` where one of its MIG devices' is unknown (docs/machines.md, "What
   * isolates MIG devices from each other").
   */
  nvidiaCaps: readonly number[] | 'all';
}

export class GpuShareError extends Error {}

const MiB = 1024 * 1024;

/**
 * A GPU the machine registered is named by its UUID where it has one: a devices cgroup or a
 * sandbox shows a process only its own device files, and CUDA then numbers what it sees from 0, so
 * an index would name another GPU or none; a UUID names the same one whatever CUDA sees. A MIG
 * instance can only be named by its UUID. A declared GPU (no UUID) and an index the agent did not
 * register (an older registration) keep the index.
 */
export function attemptGpus(a: Pick<AssignmentWire, 'gpuIndices' | 'gpuShare'>, gpus: readonly DetectedGpu[], sharing: GpuSharingMode): AttemptGpus {
  const share = a.gpuShare;
  if (share && a.gpuIndices.length !== 1) {
    throw new GpuShareError(`a share of a GPU (${share.milli}/1000) must come with exactly one GPU, got ${a.gpuIndices.length}`);
  }
  const chosen = a.gpuIndices.map((i) => gpus.find((g) => g.index === i) ?? { index: i, uuid: null, deviceMinor: i, migCaps: undefined });
  const env: Record<string, string> = {
    // Empty for a CPU stage: CUDA then sees no device, rather than every device on the machine.
    CUDA_VISIBLE_DEVICES: chosen.map((g) => g.uuid ?? String(g.index)).join(','),
    // Where indices remain (declared GPUs), they are nvidia-smi's, which numbers GPUs by PCI bus;
    // CUDA's default order (fastest first) can differ on a machine with mixed GPUs.
    CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
  };
  if (share && sharing === 'mps') Object.assign(env, mpsShareEnv(share));
  return { env, deviceMinors: [...new Set(chosen.map((g) => g.deviceMinor))], nvidiaCaps: capabilityMinors(chosen) };
}

function capabilityMinors(chosen: readonly Pick<DetectedGpu, 'migCaps'>[]): readonly number[] | 'all' {
  const minors = new Set<number>();
  for (const { migCaps } of chosen) {
    if (!migCaps) continue;
    if ('unknown' in migCaps) return 'all';
    for (const m of migCaps.minors) minors.add(m);
  }
  return [...minors].sort((x, y) => x - y);
}

/**
 * The variables an MPS client reads to bound itself (NVIDIA's MPS guide, "Environment
 * Variables"): the share of the GPU's threads, in percent, rounded up so a share never gets less
 * than it was given, at least 1; and its device memory, `<device>=<MiB>M`, the device being 0
 * because CUDA_VISIBLE_DEVICES shows it this one GPU only, rounded down so it never gets more.
 * Checked on an H200 (driver 580): 25 % gave 32 of 132 SMs; `0=2048M` let 1 GiB be allocated and
 * refused 3 GiB (docs/machines.md).
 */
export function mpsShareEnv(share: NonNullable<AssignmentWire['gpuShare']>): Record<string, string> {
  const env: Record<string, string> = { CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: String(Math.max(1, Math.ceil(share.milli / 10))) };
  if (share.memoryBytes !== undefined) env.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = `0=${Math.max(1, Math.floor(share.memoryBytes / MiB))}M`;
  return env;
}
