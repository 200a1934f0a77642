import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { QuantityError } from '../../spec/quantity.js';
import { detectMachine, MachineConfigError, parseGpuDeclaration, parseLabels } from './machine-detect.js';

const noGpus = async () => null;

describe('detectMachine', () => {
  it('declares GPUs from TYPE:N without asking nvidia-smi', async () => {
    const m = await detectMachine({
      gpus: 'H100:2',
      discover: () => {
        throw new Error('must not be called');
      },
    });
    expect(m.gpusDeclared).toBe(true);
    expect(m.gpus).toEqual([
      { index: 0, uuid: null, name: 'declared h100', type: 'h100', memoryMiB: null, deviceMinor: 0 },
      { index: 1, uuid: null, name: 'declared h100', type: 'h100', memoryMiB: null, deviceMinor: 1 },
    ]);
    expect((await detectMachine({ gpus: 'none' })).gpus).toEqual([]);
  });

  it('takes discovered GPUs as real, and none as none', async () => {
    const real = await detectMachine({
      discover: async () => [{ index: 0, uuid: 'GPU-1', name: 'NVIDIA A100-SXM4-80GB', type: 'a100', memoryMiB: 81920, deviceMinor: 0 }],
    });
    expect(real.gpusDeclared).toBe(false);
    expect(real.gpus).toEqual([{ index: 0, uuid: 'GPU-1', name: 'NVIDIA A100-SXM4-80GB', type: 'a100', memoryMiB: 81920, deviceMinor: 0 }]);
    const none = await detectMachine({ discover: noGpus });
    expect(none).toMatchObject({ gpus: [], gpusDeclared: false });
  });

  it('parses quantities and falls back to what the OS says', async () => {
    const m = await detectMachine({ cpu: '1500m', memory: '2Gi', region: 'eu', name: 'cpu-1', labels: { zone: 'a' }, discover: noGpus });
    expect(m).toMatchObject({ name: 'cpu-1', cpuMillis: 1500, memoryBytes: 2 * 1024 ** 3, region: 'eu', labels: { zone: 'a' } });
    const d = await detectMachine({ discover: noGpus });
    expect(d.cpuMillis).toBe(os.availableParallelism() * 1000);
    expect(d.memoryBytes).toBe(os.totalmem());
    expect(d.region).toBeNull();
    expect(d.name).toMatch(/^[A-Za-z0-9][A-Za-z0-9._-]*$/);
    await expect(detectMachine({ cpu: 'lots', discover: noGpus })).rejects.toThrow(QuantityError);
    await expect(detectMachine({ memory: '2 apples', discover: noGpus })).rejects.toThrow(QuantityError);
    await expect(detectMachine({ name: 'bad name', discover: noGpus })).rejects.toThrow(MachineConfigError);
  });
});

describe('parseGpuDeclaration', () => {
  it('rejects what is not TYPE:N', () => {
    expect(parseGpuDeclaration(' a100:8 ')).toEqual({ type: 'a100', count: 8, memoryMiB: null });
    expect(parseGpuDeclaration('h100:4:80Gi')).toEqual({ type: 'h100', count: 4, memoryMiB: 80 * 1024 });
    expect(() => parseGpuDeclaration('h100:4:lots')).toThrow('--gpus: GPU memory "lots" is not a quantity (for example 80Gi)');
    expect(() => parseGpuDeclaration('h100:4:1k')).toThrow(/at least 1Mi/);
    expect(() => parseGpuDeclaration('h100:4:80Gi:x')).toThrow(/TYPE:COUNT:MEMORY/);
    expect(() => parseGpuDeclaration('h100')).toThrow(/TYPE:COUNT/);
    expect(() => parseGpuDeclaration('h100:0')).toThrow(/count must be 1 to 64/);
    expect(() => parseGpuDeclaration('h100:65')).toThrow(/count must be 1 to 64/);
    expect(() => parseGpuDeclaration('h1 00:2')).toThrow(MachineConfigError);
    expect(() => parseGpuDeclaration('h#100:2')).toThrow(/GPU type/);
  });
});

describe('parseLabels', () => {
  it('parses k=v and keeps "=" inside values', () => {
    expect(parseLabels(['zone=a', 'team=ml=research', 'empty='])).toEqual({ zone: 'a', team: 'ml=research', empty: '' });
  });

  it('says what is wrong', () => {
    expect(() => parseLabels(['zone'])).toThrow('label "zone" must be key=value');
    expect(() => parseLabels(['=a'])).toThrow('has an empty key');
    expect(() => parseLabels(['a b=c'])).toThrow('label key "a b"');
    expect(() => parseLabels(['zone=a', 'zone=b'])).toThrow('label "zone" is given twice');
  });
});
