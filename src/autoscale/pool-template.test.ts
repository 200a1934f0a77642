import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ValidationError } from '../spec/validation-error.js';
import { describeTemplate, parsePools, templateEntry, templateMachine } from './pool-template.js';

function issues(value: unknown): { path: string; message: string }[] {
  try {
    parsePools(value);
  } catch (err) {
    if (err instanceof ValidationError) return err.issues;
    throw err;
  }
  throw new Error('expected a ValidationError');
}

const ISSUE_EXAMPLE = `
pools:
  - name: h100
    template: { cpu: 32, memory: 256Gi, gpus: { type: H100, count: 8 }, region: us-east }
    autoscale: { provider: local, min: 0, max: 4, idleSeconds: 300, bootTimeoutSeconds: 600 }
  - name: cpu
    template: { cpu: 500m, memory: 1G, labels: { disk: ssd } }
    autoscale: { provider: command, command: ./start.sh, min: 1, max: 10, idleSeconds: 60, bootTimeoutSeconds: 120, maxStartsPerInterval: 2 }
`;

describe('parsePools', () => {
  it("reads the issue's example into millicores, bytes and lower-case GPU types", () => {
    const pools = parsePools((parse(ISSUE_EXAMPLE) as { pools: unknown }).pools);
    expect(pools).toEqual([
      {
        name: 'h100',
        template: { cpuMillis: 32000, memoryBytes: 256 * 1024 ** 3, gpus: { type: 'h100', count: 8 }, region: 'us-east', labels: {} },
        autoscale: {
          provider: 'local',
          command: null,
          min: 0,
          max: 4,
          idleSeconds: 300,
          bootTimeoutSeconds: 600,
          maxStartsPerInterval: null,
          spareMachines: 0,
        },
      },
      {
        name: 'cpu',
        template: { cpuMillis: 500, memoryBytes: 1e9, gpus: null, region: null, labels: { disk: 'ssd' } },
        autoscale: {
          provider: 'command',
          command: './start.sh',
          min: 1,
          max: 10,
          idleSeconds: 60,
          bootTimeoutSeconds: 120,
          maxStartsPerInterval: 2,
          spareMachines: 0,
        },
      },
    ]);
    expect(describeTemplate(pools[0]!.template)).toBe('8 × h100, 32 CPU, 256Gi');
  });

  it('names the path of each problem, all of them at once', () => {
    const found = issues([
      {
        name: 'a',
        template: { cpu: 'lots', memory: '1Gi' },
        autoscale: { provider: 'local', min: 3, max: 2, idleSeconds: 1, bootTimeoutSeconds: 1 },
      },
      {
        name: 'a',
        template: { cpu: 1, memory: '1Gi' },
        autoscale: { provider: 'command', min: 0, max: 1, idleSeconds: 1, bootTimeoutSeconds: 1 },
      },
    ]);
    expect(found.map((i) => i.path)).toEqual(['/pools/0/template/cpu', '/pools/0/autoscale/min', '/pools/1/name', '/pools/1/autoscale/command']);
    expect(found[0]!.message).toMatch(/not a CPU quantity/);
    expect(found[1]!.message).toBe('min (3) is above max (2)');
    expect(found[2]!.message).toBe('duplicate pool name "a"');
    expect(found[3]!.message).toMatch(/needs the executable/);
  });

  it('refuses unknown fields, a wrong provider, a missing bound and a negative timeout, by path', () => {
    const found = issues([
      {
        name: 'g',
        template: { cpu: 1, memory: '1Gi', gpu: { type: 'h100', count: 1 } },
        autoscale: { provider: 'aws', max: 1, idleSeconds: -1, bootTimeoutSeconds: 1 },
      },
    ]);
    const paths = found.map((i) => i.path);
    expect(paths).toContain('/pools/0/template/gpu');
    expect(paths).toContain('/pools/0/autoscale/provider');
    expect(paths).toContain('/pools/0/autoscale/min');
    expect(paths).toContain('/pools/0/autoscale/idleSeconds');
  });

  it('refuses a local pool given a command, and a section that is not a list', () => {
    expect(
      issues([
        { name: 'x', template: { cpu: 1, memory: 1 }, autoscale: { provider: 'local', command: 'x', min: 0, max: 1, idleSeconds: 0, bootTimeoutSeconds: 1 } },
      ]),
    ).toEqual([{ path: '/pools/0/autoscale/command', message: 'provider "local" runs gantry agent itself and takes no command' }]);
    expect(issues({ name: 'x' })[0]!.path).toBe('/pools');
    expect(
      issues([
        {
          name: 'x',
          template: { cpu: 1, memory: 1 },
          autoscale: { provider: 'local', min: 0, max: 1, spareMachines: 2, idleSeconds: 0, bootTimeoutSeconds: 1 },
        },
      ]),
    ).toEqual([{ path: '/pools/0/autoscale/spareMachines', message: 'spareMachines (2) is above max (1)' }]);
  });

  it('reads gpus.memory into bytes, carries it to the GPUs of the idle machine and says it in words', () => {
    const [p] = parsePools([
      {
        name: 'h100',
        template: { cpu: 32, memory: '256Gi', gpus: { type: 'H100', count: 2, memory: '80Gi' } },
        autoscale: { provider: 'local', min: 0, max: 1, idleSeconds: 0, bootTimeoutSeconds: 1 },
      },
    ]);
    expect(p!.template.gpus).toEqual({ type: 'h100', count: 2, memoryBytes: 80 * 1024 ** 3 });
    const m = templateMachine(p!.template, 'h100:1');
    expect(m.gpus.map((g) => [g.memoryBytesTotal, g.memoryBytesFree])).toEqual([
      [80 * 1024 ** 3, 80 * 1024 ** 3],
      [80 * 1024 ** 3, 80 * 1024 ** 3],
    ]);
    expect(describeTemplate(p!.template)).toBe('2 × h100 (80Gi), 32 CPU, 256Gi');
    // Without it the GPUs' memory is unknown, as on a declared machine that does not say.
    const [q] = parsePools((parse(ISSUE_EXAMPLE) as { pools: unknown }).pools);
    expect(q!.template.gpus).not.toHaveProperty('memoryBytes');
    expect(templateMachine(q!.template, 'x').gpus[0]).not.toHaveProperty('memoryBytesTotal');
  });

  it('writes a template back as the cluster file spells it, exactly (bytes where a suffix would round)', () => {
    const [h100, cpu] = parsePools((parse(ISSUE_EXAMPLE) as { pools: unknown }).pools);
    expect(templateEntry(h100!.template)).toEqual({ cpu: '32', memory: '256Gi', gpus: { type: 'h100', count: 8 }, region: 'us-east', labels: {} });
    // 1G is 953.67Mi: formatMemory's "953.7Mi" would offer 52 KB less than the simulation counted.
    expect(templateEntry(cpu!.template)).toEqual({ cpu: '500m', memory: '1000000000', labels: { disk: 'ssd' } });
    const [g] = parsePools([
      {
        name: 'g',
        template: { cpu: 1.5, memory: '1.5Gi', gpus: { type: 'a100', count: 1, memory: '40Gi' } },
        autoscale: { provider: 'local', min: 0, max: 1, idleSeconds: 0, bootTimeoutSeconds: 1 },
      },
    ]);
    expect(templateEntry(g!.template)).toEqual({ cpu: '1500m', memory: '1.5Gi', gpus: { type: 'a100', count: 1, memory: '40Gi' }, labels: {} });
  });

  it('refuses a GPU memory below 1Mi or not a quantity, at its path', () => {
    const pool = (memory: unknown) => ({
      name: 'g',
      template: { cpu: 1, memory: '1Gi', gpus: { type: 'h100', count: 1, memory } },
      autoscale: { provider: 'local', min: 0, max: 1, idleSeconds: 0, bootTimeoutSeconds: 1 },
    });
    expect(issues([pool('512Ki')])).toEqual([{ path: '/pools/0/template/gpus/memory', message: 'GPU memory must be at least 1Mi, got 512Ki' }]);
    const [bad] = issues([pool('lots')]);
    expect(bad!.path).toBe('/pools/0/template/gpus/memory');
    expect(bad!.message).toMatch(/lots/);
  });

  it('the template as an idle machine the scheduler can place on', () => {
    const [p] = parsePools((parse(ISSUE_EXAMPLE) as { pools: unknown }).pools);
    const m = templateMachine(p!.template, 'h100:1');
    expect(m).toMatchObject({ id: 'h100:1', name: 'h100:1', health: 'ready', scheduling: 'eligible', region: 'us-east', cpuMillisFree: 32000 });
    expect(m.gpus.map((g) => `${g.index}:${g.type}:${g.free}`)).toEqual([
      '0:h100:true',
      '1:h100:true',
      '2:h100:true',
      '3:h100:true',
      '4:h100:true',
      '5:h100:true',
      '6:h100:true',
      '7:h100:true',
    ]);
  });
});
