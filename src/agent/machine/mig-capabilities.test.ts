import { describe, expect, it } from 'vitest';
import { migCapabilities, migIsolation, type MigCapabilitySource } from './mig-capabilities.js';

const minors = new Map([
  ['gpu0/gi2/access', 21],
  ['gpu0/gi2/ci0/access', 22],
  ['gpu3/gi2/access', 408],
  ['gpu3/gi2/ci0/access', 409],
]);
const parent = { index: 0, uuid: 'GPU-a', deviceMinor: 0 };

describe('migCapabilities', () => {
  it('finds the GPU by UUID and the device by its number, and looks its ids up', () => {
    const src: MigCapabilitySource = {
      ids: [
        { uuid: 'GPU-b', minor: 1, devices: [{ device: 0, gpuInstance: 9, computeInstance: 0 }] },
        { uuid: 'GPU-a', minor: 0, devices: [{ device: 0, gpuInstance: 2, computeInstance: 0 }] },
      ],
      minors,
    };
    expect(migCapabilities(src, parent, 0)).toEqual({ minors: [21, 22] });
  });

  it("takes the GPU's minor from -q's Minor Number, else its device file's; by position where -q has no UUIDs", () => {
    const devices = [{ device: 0, gpuInstance: 2, computeInstance: 0 }];
    expect(migCapabilities({ ids: [{ uuid: 'GPU-a', minor: 3, devices }], minors }, parent, 0)).toEqual({ minors: [408, 409] });
    expect(migCapabilities({ ids: [{ uuid: null, minor: null, devices }], minors }, parent, 0)).toEqual({ minors: [21, 22] });
  });

  it('says why where anything is missing', () => {
    const ids = [{ uuid: 'GPU-a', minor: 0, devices: [{ device: 0, gpuInstance: 5, computeInstance: 0 }] }];
    expect(migCapabilities({ ids: 'nvidia-smi -q failed', minors }, parent, 0)).toEqual({ unknown: 'nvidia-smi -q failed' });
    expect(migCapabilities({ ids, minors: 'cannot read /proc/driver/nvidia-caps/mig-minors: ENOENT' }, parent, 0)).toEqual({
      unknown: 'cannot read /proc/driver/nvidia-caps/mig-minors: ENOENT',
    });
    expect(migCapabilities({ ids, minors }, parent, 1)).toEqual({ unknown: "nvidia-smi -q does not list GPU 0's MIG device 1 with its instance ids" });
    expect(migCapabilities({ ids: [{ ...ids[0]!, uuid: 'GPU-z' }], minors }, parent, 0)).toMatchObject({ unknown: expect.stringContaining('does not list') });
    expect(migCapabilities({ ids, minors }, parent, 0)).toEqual({ unknown: "mig-minors has no gpu0/gi5/ci0 (GPU 0's MIG device 0)" });
  });
});

describe('migIsolation', () => {
  it('is null without MIG devices, isolated when all are known, and not with the first reason otherwise', () => {
    expect(migIsolation([{}, {}])).toBeNull();
    expect(migIsolation([{}, { migCaps: { minors: [12, 13] } }])).toEqual({ isolated: true });
    expect(migIsolation([{ migCaps: { minors: [12, 13] } }, { migCaps: { unknown: 'nvidia-smi -q failed' } }])).toEqual({
      isolated: false,
      why: 'nvidia-smi -q failed',
    });
  });
});
