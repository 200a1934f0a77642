import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseMigDeviceIds } from './mig-device-ids.js';

// Written from NVIDIA's documented layout, not captured (test/fixtures/gpu/README.md); the header lines go.
const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../test/fixtures/gpu');
const fixture = (name: string) =>
  readFileSync(path.join(fixtures, name), 'utf8')
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .join('\n');

describe('parseMigDeviceIds', () => {
  it('reads each MIG device\'s GPU and compute instance ids under a "MIG Devices" heading, and not the Processes section\'s', () => {
    expect(parseMigDeviceIds(fixture('nvidia-smi-q-h100-mig.txt'))).toEqual([
      {
        uuid: 'GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f',
        minor: 0,
        devices: [
          { device: 0, gpuInstance: 2, computeInstance: 0 },
          { device: 1, gpuInstance: 3, computeInstance: 0 },
          { device: 2, gpuInstance: 9, computeInstance: 0 },
          { device: 3, gpuInstance: 10, computeInstance: 0 },
        ],
      },
    ]);
  });

  it('reads MIG Device blocks right under their GPU too, and a GPU without MIG as none', () => {
    expect(parseMigDeviceIds(fixture('nvidia-smi-q-mixed.txt'))).toEqual([
      {
        uuid: 'GPU-0f3b5d7e-9a1c-4e6f-8b2d-4c6e8a0b2d4f',
        minor: 0,
        devices: [
          { device: 0, gpuInstance: 1, computeInstance: 0 },
          { device: 1, gpuInstance: 2, computeInstance: 0 },
        ],
      },
      { uuid: 'GPU-1a4c6e8b-0d2f-4a6c-9e8b-5d7f9b1c3e5a', minor: 1, devices: [] },
    ]);
  });

  it('leaves out a MIG device missing an id or holding one that is not a number, and takes N/A minors as unknown', () => {
    const text = [
      'GPU 00000000:07:00.0',
      '    MIG Devices',
      '        MIG Device',
      '            Index                 : 0',
      '            GPU Instance ID       : N/A',
      '            Compute Instance ID   : 0',
      '        MIG Device',
      '            Index                 : 1',
      '            Compute Instance ID   : 0',
      '        MIG Device',
      '            Index                 : 2',
      '            GPU Instance ID       : 5',
      '            Compute Instance ID   : 1',
      '    Minor Number                  : N/A',
    ].join('\n');
    expect(parseMigDeviceIds(text)).toEqual([{ uuid: null, minor: null, devices: [{ device: 2, gpuInstance: 5, computeInstance: 1 }] }]);
  });

  it('finds nothing in output without a GPU section', () => {
    expect(parseMigDeviceIds('')).toEqual([]);
    expect(parseMigDeviceIds('No devices were found')).toEqual([]);
  });
});
