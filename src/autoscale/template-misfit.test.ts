import { describe, expect, it } from 'vitest';
import type { StageNeed } from '../scheduler/checks.js';
import type { PoolTemplate } from './pool-template.js';
import { templateMisfit } from './template-misfit.js';

const Gi = 1024 ** 3;

function pool(name: string, t: Partial<PoolTemplate['template']>): PoolTemplate {
  return {
    name,
    template: { cpuMillis: 16000, memoryBytes: 64 * Gi, gpus: null, region: null, labels: {}, ...t },
    autoscale: { provider: 'local', command: null, min: 0, max: 1, idleSeconds: 60, bootTimeoutSeconds: 60, maxStartsPerInterval: null, spareMachines: 0 },
  };
}

function need(n: Partial<StageNeed>): StageNeed {
  const gpuCount = n.gpuCount ?? 0;
  return {
    cpuMillis: 1000,
    memoryBytes: Gi,
    gpuCount,
    gpuTypes: [],
    gpuMilli: gpuCount > 0 ? 1000 : 0,
    gpuMemoryBytes: null,
    region: null,
    labels: {},
    allowGpuMachines: false,
    ...n,
  };
}

const cpu = pool('cpu', {});
const a100 = pool('a100', { gpus: { type: 'a100', count: 4 }, region: 'us', labels: { net: 'ib' } });

describe('templateMisfit', () => {
  it('null when a template could run it', () => {
    expect(templateMisfit(need({}), [a100, cpu])).toBeNull();
    expect(templateMisfit(need({ gpuCount: 4, gpuTypes: ['a100'], region: 'us' }), [cpu, a100])).toBeNull();
  });

  it('names what the nearest template lacks', () => {
    expect(templateMisfit(need({ labels: { net: 'roce' }, region: 'us', gpuCount: 1 }), [cpu, a100])).toEqual({
      kind: 'labels',
      reason: 'no template in region us carries labels net=roce',
    });
    expect(templateMisfit(need({ cpuMillis: 64000 }), [cpu])).toEqual({
      kind: 'too-big',
      reason: 'too big for any template: it needs 64 CPU, 1Gi; the nearest, cpu, is 16 CPU, 64Gi',
    });
    expect(templateMisfit(need({ gpuCount: 1, gpuTypes: ['h100'] }), [cpu, a100])!.kind).toBe('gpu-type');
    expect(templateMisfit(need({ region: 'eu' }), [cpu, a100])!.reason).toBe('no template serves region eu');
  });

  it('a CPU stage with only GPU templates, and no templates at all', () => {
    expect(templateMisfit(need({ region: 'us', labels: { net: 'ib' } }), [a100])).toEqual({
      kind: 'gpu-machine',
      reason: 'a CPU stage, and every template that matches it has GPUs (placement.allowGpuMachines: true lets it in)',
    });
    expect(templateMisfit(need({ region: 'us', labels: { net: 'ib' }, allowGpuMachines: true }), [a100])).toBeNull();
    expect(templateMisfit(need({}), [])!.kind).toBe('no-templates');
  });
});
