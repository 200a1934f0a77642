import { describe, expect, it } from 'vitest';
import { formatBytes, formatCpu, formatGpuPlace, formatGpuRequest, formatGpus, formatShare } from './format-quantity';
import { gpuClass } from './gpu-use';
import { gpusUsed, gpuUseText } from '../../api/contract/gpu-use';

describe('format-quantity', () => {
  it('CPUs as the spec writes them', () => {
    expect(formatCpu(4000)).toBe('4');
    expect(formatCpu(500)).toBe('500m');
    expect(formatCpu(1500)).toBe('1.5');
  });
  it('memory in binary units', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(2 ** 29)).toBe('512 MiB');
    expect(formatBytes(1.5 * 2 ** 30)).toBe('1.5 GiB');
    expect(formatBytes(16 * 2 ** 30)).toBe('16 GiB');
  });
  it('shares', () => {
    expect(formatShare(1, 3)).toBe('33%');
    expect(formatShare(0, 0)).toBe('–');
  });
});

describe('GPUs and shares of a GPU (issue 29)', () => {
  const gpu = (index: number, usedMilli: number) => ({ index, type: 'h100', name: 'H100', uuid: null, busy: usedMilli > 0, usedMilli });
  it('what a stage asks for: whole GPUs, a share, GPU memory', () => {
    expect(formatGpuRequest({ count: 2, types: ['h100'] })).toBe('2× h100');
    expect(formatGpuRequest({ count: 1, milli: 250, types: [] })).toBe('0.25× GPU');
    expect(formatGpuRequest({ count: 1, milli: 500, memoryBytes: 10 * 2 ** 30, types: ['t4', 'l4'] }, 'any GPU', ' or ')).toBe('0.5× t4 or l4 (10 GiB)');
  });
  it('where an attempt runs, its share included', () => {
    expect(formatGpus({ gpus: [0, 1], gpuType: 'h100' })).toBe('h100:0,1');
    expect(formatGpus({ gpus: [3], gpuType: 'h100', gpuShare: { milli: 500 } })).toBe('0.5 of h100:3');
    expect(formatGpuPlace({ gpus: [3], gpuShare: { milli: 500 } })).toBe('GPU 3 (0.5)');
    expect(formatGpuPlace({ gpus: [0, 1] })).toBe('GPU 0,1');
  });
  it("a machine's GPUs used, a share counting its part", () => {
    expect(gpusUsed({ gpus: [gpu(0, 1000), gpu(1, 250), gpu(2, 250), gpu(3, 0)] })).toBe(1.5);
    expect([gpu(0, 1000), gpu(1, 250), gpu(2, 0)].map((g) => [gpuClass(g), gpuUseText(g)])).toEqual([
      [' busy', 'busy'],
      [' shared', '0.25 used by shares'],
      ['', 'free'],
    ]);
    // A server before shares: busy or free.
    expect(gpusUsed({ gpus: [{ index: 0, type: 'h100', name: 'H100', uuid: null, busy: true }] })).toBe(1);
  });
});
