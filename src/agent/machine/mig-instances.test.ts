import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { migMemoryMiB, parseMigProfiles, parseNvidiaSmiList } from './mig-instances.js';

// test/fixtures/gpu/README.md says where each comes from (real H200 output, or NVIDIA's documented format).
const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../test/fixtures/gpu');
const fixture = (name: string) => readFileSync(path.join(fixtures, name), 'utf8');

describe('parseNvidiaSmiList', () => {
  it('reads a GPU without MIG (real H200 output)', () => {
    expect(parseNvidiaSmiList(fixture('nvidia-smi-L-h200.txt'))).toEqual([
      { index: 0, name: 'NVIDIA H200', uuid: 'GPU-d342271d-0f7c-f6bc-ecb6-86528c6fcfaa', mig: [] },
    ]);
  });

  it('reads an H100 split 3g.40gb + 2g.20gb + 1g.10gb x2', () => {
    const [gpu, ...rest] = parseNvidiaSmiList(fixture('nvidia-smi-L-h100-mig.txt'));
    expect(rest).toEqual([]);
    expect(gpu).toMatchObject({ index: 0, name: 'NVIDIA H100 80GB HBM3', uuid: 'GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f' });
    expect(gpu!.mig).toEqual([
      { profile: '3g.40gb', device: 0, uuid: 'MIG-a1f3e0b2-6c4d-5e8f-9a0b-1c2d3e4f5a6b' },
      { profile: '2g.20gb', device: 1, uuid: 'MIG-b2e4f1c3-7d5e-5f9a-8b1c-2d3e4f5a6b7c' },
      { profile: '1g.10gb', device: 2, uuid: 'MIG-c3f5a2d4-8e6f-5a0b-9c2d-3e4f5a6b7c8d' },
      { profile: '1g.10gb', device: 3, uuid: 'MIG-d4a6b3e5-9f7a-5b1c-8d3e-4f5a6b7c8d9e' },
    ]);
  });

  it('reads seven 1g.5gb instances and a mixed machine, each MIG device under its own GPU', () => {
    const [a100] = parseNvidiaSmiList(fixture('nvidia-smi-L-a100-1g5gb.txt'));
    expect(a100!.mig.map((d) => [d.profile, d.device])).toEqual([0, 1, 2, 3, 4, 5, 6].map((n) => ['1g.5gb', n]));
    const mixed = parseNvidiaSmiList(fixture('nvidia-smi-L-mixed.txt'));
    expect(mixed.map((g) => [g.index, g.mig.map((d) => d.profile)])).toEqual([
      [0, ['4g.40gb', '3g.40gb']],
      [1, []],
    ]);
  });

  it('keeps the UUID form of drivers before R470 and compute-instance profiles', () => {
    const text = 'GPU 0: A100-SXM4-40GB (UUID: GPU-e91edf3b)\r\n  MIG 1c.3g.20gb Device 0: (UUID: MIG-GPU-e91edf3b/1/0)\r\n';
    expect(parseNvidiaSmiList(text)[0]!.mig).toEqual([{ profile: '1c.3g.20gb', device: 0, uuid: 'MIG-GPU-e91edf3b/1/0' }]);
  });

  it.each([
    ['  MIG 1g.5gb Device 0: (UUID: MIG-x)', /line 1: a MIG device before any GPU/],
    ['GPU 0: NVIDIA H200 (UUID: GPU-a)\nNo devices were found', /line 2: neither/],
    ['GPU x: NVIDIA H200 (UUID: GPU-a)', /line 1: neither/],
  ])('refuses %j', (text, msg) => {
    expect(() => parseNvidiaSmiList(text)).toThrow(msg);
  });
});

describe('parseMigProfiles and migMemoryMiB', () => {
  it("reads each profile's memory from the real H200 table, which its name only rounds", () => {
    const h200 = parseMigProfiles(fixture('nvidia-smi-mig-lgip-h200.txt')).get(0)!;
    expect(Object.fromEntries(h200)).toEqual({
      '1g.18gb': 16 * 1024,
      '1g.18gb+me': 16 * 1024,
      '1g.35gb': 32.5 * 1024,
      '2g.35gb': 32.5 * 1024,
      '3g.71gb': 69.75 * 1024,
      '4g.71gb': 69.75 * 1024,
      '7g.141gb': 140 * 1024,
    });
    expect(migMemoryMiB('3g.71gb', h200)).toBe(71424);
    // A compute instance shares its GPU instance's memory.
    expect(migMemoryMiB('1c.3g.71gb', h200)).toBe(71424);
  });

  it("falls back to the name's figure, as GiB, where the table does not say", () => {
    expect(migMemoryMiB('3g.40gb', undefined)).toBe(40 * 1024);
    expect(migMemoryMiB('1g.5gb', new Map())).toBe(5 * 1024);
    expect(migMemoryMiB('odd', undefined)).toBeNull();
    expect(parseMigProfiles('')).toEqual(new Map());
  });
});
