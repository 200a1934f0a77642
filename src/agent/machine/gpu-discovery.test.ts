import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { discoverGpus, gpuTypeFromName, NVIDIA_SMI_ARGS, NVIDIA_SMI_ARGS_BEFORE_MIG, offeredGpus, parseNvidiaSmiQuery } from './gpu-discovery.js';
import { parseMigDeviceIds } from './mig-device-ids.js';
import { parseMigProfiles, parseNvidiaSmiList } from './mig-instances.js';
import { parseMigMinors } from './mig-minors.js';

// Real nvidia-smi output from an H200 machine, kept in the repository (test/fixtures/gpu/README.md).
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const fixture = path.resolve(repoRoot, 'test/fixtures/gpu/nvidia-smi-query.csv');
const gpuFixture = (name: string) => readFileSync(path.resolve(repoRoot, 'test/fixtures/gpu', name), 'utf8');
/** A fixture written from a documented format, without its `#` header (the real output has none). */
const writtenFixture = (name: string) =>
  gpuFixture(name)
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .join('\n');

const H200 = {
  index: 0,
  uuid: 'GPU-266c8396-dfbe-13b3-5ad6-311117e6bd98',
  name: 'NVIDIA H200',
  type: 'h200',
  memoryMiB: 143771,
  deviceMinor: 0,
};

describe('parseNvidiaSmiQuery', () => {
  it('parses the real fixture (with its extra trailing columns)', () => {
    // Its fifth column is not mig.mode.current: MIG off.
    expect(parseNvidiaSmiQuery(readFileSync(fixture, 'utf8'))).toEqual([{ ...H200, migEnabled: false }]);
  });

  it("parses the agent's own query with mig.mode.current (real H200 output, MIG disabled)", () => {
    expect(parseNvidiaSmiQuery(gpuFixture('nvidia-smi-query-mig-mode-h200.csv'))).toEqual([
      { ...H200, uuid: 'GPU-c62500a8-6aec-5719-f84a-d4fd0be328aa', memoryMiB: 143771, migEnabled: false },
    ]);
  });

  it('parses several GPUs, tolerating blank lines and CRLF', () => {
    const csv = '0, GPU-a, NVIDIA A100-SXM4-80GB, 81920\r\n\r\n1, GPU-b, NVIDIA A100-SXM4-80GB, 81920\r\n';
    expect(parseNvidiaSmiQuery(csv)).toEqual([
      { index: 0, uuid: 'GPU-a', name: 'NVIDIA A100-SXM4-80GB', type: 'a100', memoryMiB: 81920, deviceMinor: 0, migEnabled: false },
      { index: 1, uuid: 'GPU-b', name: 'NVIDIA A100-SXM4-80GB', type: 'a100', memoryMiB: 81920, deviceMinor: 1, migEnabled: false },
    ]);
  });

  it('returns no GPUs for empty output', () => {
    expect(parseNvidiaSmiQuery('')).toEqual([]);
    expect(parseNvidiaSmiQuery('\n')).toEqual([]);
  });

  it.each([
    ['0, GPU-a, NVIDIA H200', /line 1: expected at least 4 columns/],
    ['x, GPU-a, NVIDIA H200, 100', /index "x"/],
    ['0, , NVIDIA H200, 100', /uuid is empty/],
    ['0, GPU-a, , 100', /name is empty/],
    ['0, GPU-a, NVIDIA H200, [N/A]', /memory.total "\[N\/A\]"/],
  ])('rejects malformed line %j', (line, msg) => {
    expect(() => parseNvidiaSmiQuery(line)).toThrow(msg);
  });

  it('names the line number of a malformed line', () => {
    expect(() => parseNvidiaSmiQuery('0, GPU-a, NVIDIA H200, 100\nNo devices were found\n')).toThrow(/line 2/);
  });
});

describe('gpuTypeFromName', () => {
  it.each([
    ['NVIDIA H200', 'h200'],
    ['NVIDIA A100-SXM4-80GB', 'a100'],
    ['NVIDIA A100 80GB PCIe', 'a100'],
    ['Tesla V100-SXM2-16GB', 'v100'],
    ['Tesla T4', 't4'],
    ['NVIDIA GeForce RTX 4090', 'rtx4090'],
    ['NVIDIA GeForce GTX 1080 Ti', 'gtx1080ti'],
    ['NVIDIA RTX A6000', 'rtxa6000'],
    ['NVIDIA RTX 6000 Ada Generation', 'rtx6000ada'],
    ['Quadro RTX 8000', 'rtx8000'],
    ['NVIDIA L40S', 'l40s'],
    ['NVIDIA H100 80GB HBM3', 'h100'],
    ['NVIDIA H100 NVL', 'h100'],
    ['NVIDIA GH200 480GB', 'gh200'],
    ['NVIDIA A10G', 'a10g'],
  ])('%s -> %s', (name, type) => {
    expect(gpuTypeFromName(name)).toBe(type);
  });
});

describe('discoverGpus', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'gantry-gpu-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  function script(name: string, body: string): string {
    const file = path.join(dir, name);
    writeFileSync(file, `#!/bin/sh\n${body}\n`);
    chmodSync(file, 0o755);
    return file;
  }

  it('returns null when the command does not exist', async () => {
    expect(await discoverGpus({ command: path.join(dir, 'no-such-nvidia-smi') })).toBeNull();
  });

  it('returns null when the command fails', async () => {
    const failing = script('failing-smi', 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9');
    expect(await discoverGpus({ command: failing })).toBeNull();
  });

  it('returns null when the command times out', async () => {
    const slow = script('slow-smi', 'exec sleep 5');
    expect(await discoverGpus({ command: slow, timeoutMs: 200 })).toBeNull();
  });

  it('runs the command with the query arguments and parses its output', async () => {
    const expected = NVIDIA_SMI_ARGS.join(' ');
    const fake = script('fake-smi', `if [ "$*" != "${expected}" ]; then echo "unexpected args: $*" >&2; exit 2; fi\ncat '${fixture.replace(/'/g, `'\\''`)}'`);
    expect(await discoverGpus({ command: fake })).toEqual([H200]);
  });
});

describe('offeredGpus (MIG)', () => {
  const offered = (query: string, list: string, lgip = '') =>
    offeredGpus(parseNvidiaSmiQuery(gpuFixture(query)), parseNvidiaSmiList(gpuFixture(list)), parseMigProfiles(lgip));

  it('offers an H100 in MIG mode as its four instances, each a type of its own, never whole, with its capability files', () => {
    const caps = { ids: parseMigDeviceIds(writtenFixture('nvidia-smi-q-h100-mig.txt')), minors: parseMigMinors(writtenFixture('mig-minors.txt')) };
    const gpus = offeredGpus(
      parseNvidiaSmiQuery(gpuFixture('nvidia-smi-query-h100-mig.csv')),
      parseNvidiaSmiList(gpuFixture('nvidia-smi-L-h100-mig.txt')),
      new Map(),
      caps,
    );
    // gpu0/gi2 (3g.40gb), gi3 (2g.20gb), gi9 and gi10 (1g.10gb), each with its compute instance 0.
    expect(gpus.map((g) => g.migCaps)).toEqual([{ minors: [21, 22] }, { minors: [30, 31] }, { minors: [84, 85] }, { minors: [93, 94] }]);
    expect(gpus.map(({ migCaps: _, ...g }) => g)).toEqual([
      {
        index: 100,
        uuid: 'MIG-a1f3e0b2-6c4d-5e8f-9a0b-1c2d3e4f5a6b',
        name: 'NVIDIA H100 80GB HBM3 MIG 3g.40gb',
        type: 'h100-3g.40gb',
        memoryMiB: 40960,
        deviceMinor: 0,
      },
      {
        index: 101,
        uuid: 'MIG-b2e4f1c3-7d5e-5f9a-8b1c-2d3e4f5a6b7c',
        name: 'NVIDIA H100 80GB HBM3 MIG 2g.20gb',
        type: 'h100-2g.20gb',
        memoryMiB: 20480,
        deviceMinor: 0,
      },
      {
        index: 102,
        uuid: 'MIG-c3f5a2d4-8e6f-5a0b-9c2d-3e4f5a6b7c8d',
        name: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb',
        type: 'h100-1g.10gb',
        memoryMiB: 10240,
        deviceMinor: 0,
      },
      {
        index: 103,
        uuid: 'MIG-d4a6b3e5-9f7a-5b1c-8d3e-4f5a6b7c8d9e',
        name: 'NVIDIA H100 80GB HBM3 MIG 1g.10gb',
        type: 'h100-1g.10gb',
        memoryMiB: 10240,
        deviceMinor: 0,
      },
    ]);
  });

  it("says each MIG device's capability files are unknown where nothing was asked for them, and gives a whole GPU none", () => {
    const gpus = offered('nvidia-smi-query-mixed.csv', 'nvidia-smi-L-mixed.txt');
    expect(gpus.map((g) => g.migCaps)).toEqual([{ unknown: 'nvidia-smi -q was not asked' }, { unknown: 'nvidia-smi -q was not asked' }, undefined]);
  });

  it('offers seven a100-1g.5gb GPUs from one A100', () => {
    const gpus = offered('nvidia-smi-query-a100-1g5gb.csv', 'nvidia-smi-L-a100-1g5gb.txt');
    expect(gpus.map((g) => [g.index, g.type, g.deviceMinor])).toEqual([0, 1, 2, 3, 4, 5, 6].map((n) => [100 + n, 'a100-1g.5gb', 0]));
    expect(new Set(gpus.map((g) => g.uuid)).size).toBe(7);
  });

  it("offers a mixed machine as the MIG GPU's instances and the other GPU whole", () => {
    expect(offered('nvidia-smi-query-mixed.csv', 'nvidia-smi-L-mixed.txt').map((g) => [g.index, g.type, g.uuid, g.deviceMinor])).toEqual([
      [100, 'a100-4g.40gb', 'MIG-5a7c9e1b-3d5f-5a7c-9e1b-3d5f7a9c1e3b', 0],
      [101, 'a100-3g.40gb', 'MIG-6b8d0f2c-4e6a-5b8d-8f2c-4e6a8b0d2f4c', 0],
      [1, 'a100', 'GPU-1a4c6e8b-0d2f-4a6c-9e8b-5d7f9b1c3e5a', 1],
    ]);
  });

  it('offers nothing of a GPU in MIG mode with no instances yet', () => {
    const query = parseNvidiaSmiQuery('0, GPU-a, NVIDIA H200, 143771, Enabled\n1, GPU-b, NVIDIA H200, 143771, Disabled');
    expect(offeredGpus(query, parseNvidiaSmiList('GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)')).map((g) => g.index)).toEqual([1]);
  });

  it("takes an instance's memory from the profiles table where it has it (real H200 -lgip)", () => {
    const query = parseNvidiaSmiQuery('0, GPU-a, NVIDIA H200, 143771, Enabled');
    const list = parseNvidiaSmiList('GPU 0: NVIDIA H200 (UUID: GPU-a)\n  MIG 3g.71gb Device 0: (UUID: MIG-x)\n  MIG 1g.18gb+me Device 1: (UUID: MIG-y)');
    const gpus = offeredGpus(query, list, parseMigProfiles(gpuFixture('nvidia-smi-mig-lgip-h200.txt')));
    expect(gpus.map((g) => [g.type, g.memoryMiB])).toEqual([
      ['h200-3g.71gb', 71424],
      ['h200-1g.18gb+me', 16384],
    ]);
  });
});

describe('discoverGpus with MIG', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'gantry-mig-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const quoted = (name: string) => `'${path.resolve(repoRoot, 'test/fixtures/gpu', name).replace(/'/g, `'\\''`)}'`;

  /** A fake nvidia-smi answering each of the agent's questions from a fixture, and failing any other. */
  function fakeSmi(name: string, answers: { query: string; list?: string; lgip?: string; beforeMig?: boolean; q?: string }): string {
    const file = path.join(dir, name);
    const cases = [
      answers.q ? `  "-q") cat ${quoted(answers.q)} ;;` : '',
      answers.beforeMig ? '' : `  "${NVIDIA_SMI_ARGS.join(' ')}") cat ${quoted(answers.query)} ;;`,
      answers.beforeMig ? `  "${NVIDIA_SMI_ARGS_BEFORE_MIG.join(' ')}") cat ${quoted(answers.query)} ;;` : '',
      answers.list ? `  "-L") cat ${quoted(answers.list)} ;;` : '',
      answers.lgip ? `  "mig -lgip") cat ${quoted(answers.lgip)} ;;` : '',
    ];
    writeFileSync(file, `#!/bin/sh\ncase "$*" in\n${cases.join('\n')}\n  *) echo "unexpected args: $*" >&2; exit 2 ;;\nesac\n`);
    chmodSync(file, 0o755);
    return file;
  }

  it('asks for the MIG devices of a machine with a GPU in MIG mode, and offers them', async () => {
    const smi = fakeSmi('smi-mixed', { query: 'nvidia-smi-query-mixed.csv', list: 'nvidia-smi-L-mixed.txt' });
    expect((await discoverGpus({ command: smi }))!.map((g) => g.type)).toEqual(['a100-4g.40gb', 'a100-3g.40gb', 'a100']);
  });

  it("reads each MIG device's capability minors from -q and mig-minors", async () => {
    const smi = fakeSmi('smi-mixed-q', { query: 'nvidia-smi-query-mixed.csv', list: 'nvidia-smi-L-mixed.txt', q: 'nvidia-smi-q-mixed.txt' });
    const migMinorsPath = path.join(dir, 'mig-minors');
    writeFileSync(migMinorsPath, writtenFixture('mig-minors.txt'));
    const gpus = (await discoverGpus({ command: smi, migMinorsPath }))!;
    expect(gpus.map((g) => [g.index, g.migCaps])).toEqual([
      [100, { minors: [12, 13] }],
      [101, { minors: [21, 22] }],
      [1, undefined],
    ]);
  });

  it('still offers the MIG devices, their capability files unknown and why, where -q fails or mig-minors cannot be read', async () => {
    const noQ = fakeSmi('smi-mixed-noq', { query: 'nvidia-smi-query-mixed.csv', list: 'nvidia-smi-L-mixed.txt' });
    const migMinorsPath = path.join(dir, 'mig-minors-2');
    writeFileSync(migMinorsPath, writtenFixture('mig-minors.txt'));
    expect((await discoverGpus({ command: noQ, migMinorsPath }))!.map((g) => g.migCaps)).toEqual([
      { unknown: 'nvidia-smi -q failed' },
      { unknown: 'nvidia-smi -q failed' },
      undefined,
    ]);
    const withQ = fakeSmi('smi-mixed-q2', { query: 'nvidia-smi-query-mixed.csv', list: 'nvidia-smi-L-mixed.txt', q: 'nvidia-smi-q-mixed.txt' });
    const missing = path.join(dir, 'no-such-mig-minors');
    const gpus = (await discoverGpus({ command: withQ, migMinorsPath: missing }))!;
    expect(gpus.map((g) => g.type)).toEqual(['a100-4g.40gb', 'a100-3g.40gb', 'a100']);
    expect(gpus[0]!.migCaps).toEqual({ unknown: expect.stringMatching(new RegExp(`^cannot read ${missing}: .*ENOENT`)) });
    // A table it cannot read is no table: the same fallback, never a refusal to start.
    writeFileSync(migMinorsPath, 'config one\n');
    expect((await discoverGpus({ command: withQ, migMinorsPath }))![0]!.migCaps).toEqual({ unknown: expect.stringContaining('mig-minors line 1') });
  });

  it('does not ask for MIG devices where no GPU is in MIG mode, and asks a driver before MIG the old query', async () => {
    const old = fakeSmi('smi-old', { query: 'nvidia-smi-query.csv', beforeMig: true });
    expect(await discoverGpus({ command: old })).toEqual([H200]);
  });

  it('fails rather than offer a MIG GPU whose instances it cannot list', async () => {
    const smi = fakeSmi('smi-nolist', { query: 'nvidia-smi-query-mixed.csv' });
    await expect(discoverGpus({ command: smi })).rejects.toThrow(/MIG instances cannot be listed/);
  });
});
