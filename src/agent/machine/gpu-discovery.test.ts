import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { discoverGpus, gpuTypeFromName, NVIDIA_SMI_ARGS, parseNvidiaSmiQuery } from './gpu-discovery.js';

// Real nvidia-smi output from an H200 machine, kept in the repository (test/fixtures/gpu/README.md).
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const fixture = path.resolve(repoRoot, 'test/fixtures/gpu/nvidia-smi-query.csv');

const H200 = {
  index: 0,
  uuid: 'GPU-266c8396-dfbe-13b3-5ad6-311117e6bd98',
  name: 'NVIDIA H200',
  type: 'h200',
  memoryMiB: 143771,
};

describe('parseNvidiaSmiQuery', () => {
  it('parses the real fixture (with its extra trailing columns)', () => {
    expect(parseNvidiaSmiQuery(readFileSync(fixture, 'utf8'))).toEqual([H200]);
  });

  it('parses several GPUs, tolerating blank lines and CRLF', () => {
    const csv = '0, GPU-a, NVIDIA A100-SXM4-80GB, 81920\r\n\r\n1, GPU-b, NVIDIA A100-SXM4-80GB, 81920\r\n';
    expect(parseNvidiaSmiQuery(csv)).toEqual([
      { index: 0, uuid: 'GPU-a', name: 'NVIDIA A100-SXM4-80GB', type: 'a100', memoryMiB: 81920 },
      { index: 1, uuid: 'GPU-b', name: 'NVIDIA A100-SXM4-80GB', type: 'a100', memoryMiB: 81920 },
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
