import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../spec/validation-error.js';
import { agentArgs, defaultCluster, parseClusterFile } from './cluster-file.js';

const dir = mkdtempSync(join(tmpdir(), 'gantry-cluster-file-'));
function file(name: string, text: string): string {
  const f = join(dir, name);
  writeFileSync(f, text);
  return f;
}

describe('cluster file: declared GPUs with their memory', () => {
  it('passes each declared GPU memory to the agent as --gpus TYPE:COUNT:MEMORY', () => {
    const c = parseClusterFile(
      file('ok.yaml', 'machines:\n  - { name: g, gpus: { type: h100, count: 2, memory: 80Gi } }\n  - { name: h, gpus: { type: t4, count: 1 } }\n'),
    );
    expect(agentArgs(c.machines[0]!, 'http://x', '/d')).toEqual(expect.arrayContaining(['--gpus', 'h100:2:80Gi']));
    expect(agentArgs(c.machines[1]!, 'http://x', '/d')).toEqual(expect.arrayContaining(['--gpus', 't4:1']));
  });

  it('refuses GPU memory that is not a quantity, naming where', () => {
    const f = file('bad.yaml', 'machines:\n  - { name: g, gpus: { type: h100, count: 2, memory: lots } }\n');
    expect(() => parseClusterFile(f)).toThrow(ValidationError);
    try {
      parseClusterFile(f);
    } catch (err) {
      expect((err as ValidationError).issues[0]!.path).toBe(`${f}#/machines/0/gpus/memory`);
    }
  });

  it('the example cluster and the default one declare their GPUs with memory, so the README share example places', () => {
    const example = parseClusterFile(join(import.meta.dirname, '../../examples/cluster.yaml'));
    for (const m of example.machines) if (m.gpus && m.gpus !== 'detect') expect(m.gpus.memory).toBeDefined();
    const gpu = defaultCluster(false).machines.find((m) => m.gpus && m.gpus !== 'detect')!;
    expect(agentArgs(gpu, 'http://x', '/d')).toEqual(expect.arrayContaining(['--gpus', 'h100:4:80Gi']));
  });
});
