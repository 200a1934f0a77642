import { describe, expect, it } from 'vitest';
import type { DetectedGpu } from '../machine/machine-detect.js';
import { attemptGpus, GpuShareError, mpsShareEnv } from './attempt-gpus.js';

const gpus: DetectedGpu[] = [
  { index: 0, uuid: 'GPU-aaaa', name: 'NVIDIA H100 80GB HBM3', type: 'h100', memoryMiB: 81559, deviceMinor: 0 },
  {
    index: 200,
    uuid: 'MIG-bbbb',
    name: 'NVIDIA H100 80GB HBM3 MIG 3g.40gb',
    type: 'h100-3g.40gb',
    memoryMiB: 40960,
    deviceMinor: 1,
    migCaps: { minors: [147, 148] },
  },
  {
    index: 201,
    uuid: 'MIG-cccc',
    name: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb',
    type: 'h100-1g.10gb',
    memoryMiB: 10240,
    deviceMinor: 1,
    migCaps: { minors: [228, 229] },
  },
  {
    index: 202,
    uuid: 'MIG-dddd',
    name: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb',
    type: 'h100-1g.10gb',
    memoryMiB: 10240,
    deviceMinor: 1,
    migCaps: { unknown: 'nvidia-smi -q failed' },
  },
];
const declared: DetectedGpu[] = [0, 1, 2].map((index) => ({ index, uuid: null, name: 'declared h100', type: 'h100', memoryMiB: null, deviceMinor: index }));

describe('attemptGpus', () => {
  it('names registered GPUs by UUID, MIG instances by their MIG UUID, and opens their parent device once', () => {
    const g = attemptGpus({ gpuIndices: [0, 200, 201] }, gpus, 'mps');
    expect(g.env).toEqual({ CUDA_VISIBLE_DEVICES: 'GPU-aaaa,MIG-bbbb,MIG-cccc', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' });
    expect(g.deviceMinors).toEqual([0, 1]);
    expect(g.nvidiaCaps).toEqual([147, 148, 228, 229]);
  });

  it("opens only its own MIG device's capability files, none for a whole GPU, and all where its device's are unknown", () => {
    expect(attemptGpus({ gpuIndices: [201] }, gpus, 'time-slicing').nvidiaCaps).toEqual([228, 229]);
    expect(attemptGpus({ gpuIndices: [0] }, gpus, 'time-slicing').nvidiaCaps).toEqual([]);
    expect(attemptGpus({ gpuIndices: [202] }, gpus, 'time-slicing').nvidiaCaps).toBe('all');
    expect(attemptGpus({ gpuIndices: [201, 202] }, gpus, 'time-slicing').nvidiaCaps).toBe('all');
  });

  it('keeps indices for declared GPUs and for an index the agent did not register', () => {
    expect(attemptGpus({ gpuIndices: [0, 2] }, declared, 'time-slicing')).toEqual({
      env: { CUDA_VISIBLE_DEVICES: '0,2', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' },
      deviceMinors: [0, 2],
      nvidiaCaps: [],
    });
    expect(attemptGpus({ gpuIndices: [7] }, gpus, 'mps').env.CUDA_VISIBLE_DEVICES).toBe('7');
  });

  it('gives a CPU stage no device at all', () => {
    expect(attemptGpus({ gpuIndices: [] }, gpus, 'mps')).toEqual({
      env: { CUDA_VISIBLE_DEVICES: '', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' },
      deviceMinors: [],
      nvidiaCaps: [],
    });
  });

  it('bounds a share with MPS variables under mps, and with nothing under time-slicing', () => {
    const a = { gpuIndices: [0], gpuShare: { milli: 250, memoryBytes: 10 * 2 ** 30 } };
    expect(attemptGpus(a, gpus, 'mps').env).toEqual({
      CUDA_VISIBLE_DEVICES: 'GPU-aaaa',
      CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '25',
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: '0=10240M',
    });
    expect(attemptGpus(a, gpus, 'time-slicing').env).toEqual({ CUDA_VISIBLE_DEVICES: 'GPU-aaaa', CUDA_DEVICE_ORDER: 'PCI_BUS_ID' });
  });

  it('refuses a share that does not come with exactly one GPU', () => {
    expect(() => attemptGpus({ gpuIndices: [0, 200], gpuShare: { milli: 500 } }, gpus, 'mps')).toThrow(GpuShareError);
    expect(() => attemptGpus({ gpuIndices: [], gpuShare: { milli: 500 } }, gpus, 'time-slicing')).toThrow(/exactly one GPU, got 0/);
  });
});

describe('mpsShareEnv', () => {
  it.each([
    [1, '1'],
    [5, '1'],
    [11, '2'],
    [250, '25'],
    [333, '34'],
    [999, '100'],
    [1000, '100'],
  ])('%i thousandths -> %s %% of the threads (rounded up, at least 1)', (milli, percent) => {
    expect(mpsShareEnv({ milli })).toEqual({ CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: percent });
  });

  it('gives the memory in whole MiB, rounded down, at least 1', () => {
    expect(mpsShareEnv({ milli: 500, memoryBytes: 1.5 * 2 ** 20 }).CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).toBe('0=1M');
    expect(mpsShareEnv({ milli: 500, memoryBytes: 100 }).CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).toBe('0=1M');
    expect(mpsShareEnv({ milli: 500, memoryBytes: 40 * 2 ** 30 }).CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).toBe('0=40960M');
  });
});
