import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../spec/validation-error.js';
import { agentArgs, defaultCluster, parseClusterFile, withDefaultPool } from './cluster-file.js';

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

function issuesOf(f: string): { path: string; message: string }[] {
  try {
    parseClusterFile(f);
  } catch (err) {
    if (err instanceof ValidationError) return err.issues;
    throw err;
  }
  throw new Error(`${f} was accepted`);
}

const POOL =
  '{ name: g, template: { cpu: 8, memory: 32Gi, gpus: { type: h100, count: 4 } }, autoscale: { provider: local, min: 0, max: 2, idleSeconds: 60, bootTimeoutSeconds: 30 } }';

describe('cluster file: pools (autoscaling)', () => {
  it('reads pools: with no machines: listed, a relative command beside the file', () => {
    const f = file(
      'pools.yaml',
      `pools:\n  - ${POOL}\n  - { name: c, template: { cpu: 4, memory: 8Gi }, autoscale: { provider: command, command: ./up.sh, min: 1, max: 3, idleSeconds: 60, bootTimeoutSeconds: 30 } }\n`,
    );
    const c = parseClusterFile(f);
    expect(c.machines).toEqual([]);
    expect(c.pools.map((p) => [p.name, p.template.gpus, p.autoscale.max])).toEqual(
      [
        ['g', { type: 'h100', count: 4 }],
        ['c', null],
      ].map(([n, g], i) => [n, g, i === 0 ? 2 : 3]),
    );
    expect(c.pools[1]!.autoscale.command).toBe(join(dir, 'up.sh'));
  });

  it('names the field of a pool that is wrong, under file#/pools', () => {
    const f = file(
      'bad-pool.yaml',
      'pools:\n  - { name: g, template: { cpu: 8, memory: 32Gi }, autoscale: { provider: local, min: 3, max: 2, idleSeconds: 60, bootTimeoutSeconds: 30 } }\n',
    );
    expect(issuesOf(f)).toEqual([{ path: `${f}#/pools/0/autoscale/min`, message: 'min (3) is above max (2)' }]);
  });

  it('refuses a file with neither machines: nor pools:', () => {
    const f = file('empty.yaml', 'machines: []\n');
    expect(issuesOf(f)[0]!.path).toBe(`${f}#/machines`);
    const g = file('nothing.yaml', '{}\n');
    expect(issuesOf(g)).toEqual([{ path: `${g}#/`, message: expect.stringContaining('machines:') }]);
  });

  it("refuses a pool whose machines' names (<pool>-<n>) a listed machine already has", () => {
    const f = file('clash.yaml', `machines:\n  - { name: g-2, cpu: 2 }\n  - { name: g-big, cpu: 2 }\npools:\n  - ${POOL}\n`);
    expect(issuesOf(f)).toEqual([{ path: `${f}#/pools/0/name`, message: expect.stringContaining('machine "g-2" would clash') }]);
    // g-big is not a name the pool makes.
    expect(parseClusterFile(file('noclash.yaml', `machines:\n  - { name: g-big, cpu: 2 }\npools:\n  - ${POOL}\n`)).pools).toHaveLength(1);
  });

  it('gantry up --autoscale: the default pool h100 in place of gpu-1, or the pools declared', () => {
    const auto = withDefaultPool(defaultCluster(false), false);
    expect(auto.machines.map((m) => m.name)).toEqual(['cpu-1']);
    expect(auto.pools).toHaveLength(1);
    const [h100] = auto.pools;
    expect(h100!.name).toBe('h100');
    expect(h100!.template.gpus).toMatchObject({ type: 'h100', count: 4 });
    expect(h100!.template.cpuMillis).toBe(8000);
    expect(h100!.autoscale).toMatchObject({ provider: 'local', min: 0, max: 2, idleSeconds: 300, bootTimeoutSeconds: 120 });
    // A file's machines all stay; a file's own pools are kept as they are.
    const listed = parseClusterFile(join(import.meta.dirname, '../../examples/cluster.yaml'));
    expect(withDefaultPool(listed, true).machines).toEqual(listed.machines);
    const declared = parseClusterFile(join(import.meta.dirname, '../../examples/autoscale-cluster.yaml'));
    expect(withDefaultPool(declared, true)).toBe(declared);
    expect(declared.pools.map((p) => p.name)).toEqual(['h100']);
  });
});
