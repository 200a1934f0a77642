import { describe, expect, it } from 'vitest';
import { parseJobSpec } from '../domain/job-spec.js';
import { ValidationError } from './validation-error.js';
import { expandSweep } from './job-sweep.js';

const issuesOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    if (e instanceof ValidationError) return e.issues;
    throw e;
  }
  throw new Error('expected a ValidationError');
};

const train = (over: Record<string, unknown> = {}) => ({
  name: 'train',
  sweep: { lr: [0.1, 0.01], seed: [1, 2, 3] },
  stages: [
    { name: 'prep', command: ['sh', '-c', 'echo ${HOME}'] },
    {
      name: 'fit',
      needs: ['prep'],
      command: ['python3', 'train.py', '--lr=${sweep.lr}', '--seed', '${sweep.seed}'],
      env: { LR: '${sweep.lr}', TAG: 'lr${sweep.lr}-s${sweep.seed}', PLAIN: 'x' },
    },
  ],
  ...over,
});

describe('expandSweep', () => {
  it('leaves a spec without a sweep alone, placeholders and all', () => {
    const spec = { name: 'a', stages: [{ name: 's', command: ['echo', '${sweep.x}'] }] };
    expect(expandSweep(spec)).toEqual([spec]);
    expect(expandSweep([1, 2])).toEqual([[1, 2]]);
  });

  it('expands to the cartesian product, first parameter slowest, with names and substituted commands and env', () => {
    const jobs = expandSweep(train()) as ReturnType<typeof train>[];
    expect(jobs.map((j) => j.name)).toEqual([
      'train-lr_0.1-seed_1',
      'train-lr_0.1-seed_2',
      'train-lr_0.1-seed_3',
      'train-lr_0.01-seed_1',
      'train-lr_0.01-seed_2',
      'train-lr_0.01-seed_3',
    ]);
    expect(jobs[4]).toEqual({
      name: 'train-lr_0.01-seed_2',
      stages: [
        { name: 'prep', command: ['sh', '-c', 'echo ${HOME}'] },
        {
          name: 'fit',
          needs: ['prep'],
          command: ['python3', 'train.py', '--lr=0.01', '--seed', '2'],
          env: { LR: '0.01', TAG: 'lr0.01-s2', PLAIN: 'x' },
        },
      ],
    });
    expect(jobs.every((j) => !('sweep' in j))).toBe(true);
    // Every expanded spec is a valid spec.
    for (const j of jobs) expect(parseJobSpec(j).name).toBe(j.name);
  });

  it('does not modify its input', () => {
    const spec = train();
    const copy = structuredClone(spec);
    expandSweep(spec);
    expect(spec).toEqual(copy);
  });

  it('writes values as text: strings as they are, numbers as JavaScript does, booleans', () => {
    const jobs = expandSweep({
      name: 'v',
      sweep: { x: ['a b/c', 1e-4, true, '1e-4'] },
      stages: [{ name: 's', command: ['run', '${sweep.x}'] }],
    }) as { name: string; stages: { command: string[] }[] }[];
    expect(jobs.map((j) => j.stages[0]!.command[1])).toEqual(['a b/c', '0.0001', 'true', '1e-4']);
    expect(jobs.map((j) => j.name)).toEqual(['v-x_a_b_c', 'v-x_0.0001', 'v-x_true', 'v-x_1e-4']);
  });

  it('numbers the jobs when the descriptive names would collide or be too long', () => {
    const collide = expandSweep({ name: 'c', sweep: { x: ['a/b', 'a_b'] }, stages: [] }) as { name: string }[];
    expect(collide.map((j) => j.name)).toEqual(['c-1', 'c-2']);
    const long = expandSweep({ name: 'l', sweep: { x: ['y'.repeat(200), 'z'] }, stages: [] }) as { name: string }[];
    expect(long.map((j) => j.name)).toEqual(['l-1', 'l-2']);
  });

  it('$${sweep. is a literal ${sweep.', () => {
    const [job] = expandSweep({ name: 'e', sweep: { x: [1] }, stages: [{ name: 's', command: ['echo', '$${sweep.x} is ${sweep.x}'] }] }) as {
      stages: { command: string[] }[];
    }[];
    expect(job!.stages[0]!.command[1]).toBe('${sweep.x} is 1');
  });

  it('reports an unknown parameter (with a suggestion), a malformed placeholder, and placeholders elsewhere', () => {
    const spec = train({
      labels: { run: '${sweep.lr}' },
      stages: [{ name: 'fit-${sweep.lr}', command: ['x', '${sweep.lrr}', '${sweep.}', '${sweep.lr'], env: { A: '${sweep.seed}${sweep.nope}' } }],
    });
    expect(issuesOf(() => expandSweep(spec))).toEqual([
      { path: '/labels/run', message: "sweep placeholders are substituted only in a stage's command and env values" },
      { path: '/stages/0/name', message: "sweep placeholders are substituted only in a stage's command and env values" },
      { path: '/stages/0/command/1', message: 'unknown sweep parameter "lrr" in ${sweep.lrr} (did you mean "lr"?); the sweep has lr, seed' },
      { path: '/stages/0/command/2', message: expect.stringMatching(/^malformed placeholder at "\$\{sweep\.\}"/) },
      { path: '/stages/0/command/3', message: expect.stringMatching(/^malformed placeholder at "\$\{sweep\.lr"/) },
      { path: '/stages/0/env/A', message: 'unknown sweep parameter "nope" in ${sweep.nope}; the sweep has lr, seed' },
    ]);
  });

  it('reports a malformed sweep: not a mapping, empty, bad names, empty lists, bad and duplicate values', () => {
    expect(issuesOf(() => expandSweep(train({ sweep: [1, 2] })))[0]).toEqual({
      path: '/sweep',
      message: 'must be a mapping of parameter names to lists of values, got a list',
    });
    expect(issuesOf(() => expandSweep(train({ sweep: {} })))[0]!.message).toContain('got an empty mapping');
    const issues = issuesOf(() => expandSweep(train({ sweep: { lr: [], '2x': [1], seed: 3, ok: [1, { a: 1 }, 1, null] } })));
    expect(issues).toEqual(
      expect.arrayContaining([
        { path: '/sweep/lr', message: 'must be a non-empty list of values, got an empty list' },
        { path: '/sweep/2x', message: expect.stringContaining('is not a parameter name') },
        { path: '/sweep/seed', message: 'must be a non-empty list of values, got the integer 3' },
        { path: '/sweep/ok/1', message: 'must be a string, a number or true/false, got a mapping' },
        { path: '/sweep/ok/2', message: 'duplicate value "1"' },
        { path: '/sweep/ok/3', message: 'must be a string, a number or true/false, got null' },
      ]),
    );
  });

  it('caps the product', () => {
    const values = Array.from({ length: 101 }, (_, i) => i);
    expect(issuesOf(() => expandSweep(train({ sweep: { lr: values, seed: values } })))).toEqual([
      { path: '/sweep', message: 'the sweep makes 101 × 101 = 10201 jobs; at most 10000' },
    ]);
    expect(expandSweep(train({ sweep: { lr: values.slice(0, 100), seed: values.slice(0, 100) } }))).toHaveLength(10_000);
    expect(issuesOf(() => expandSweep(train({ sweep: { lr: [1], seed: [1, 2, 3] } }), 2))[0]!.message).toBe('the sweep makes 1 × 3 = 3 jobs; at most 2');
  });

  it('keeps malformed parts as they are, for the server to report', () => {
    const [job] = expandSweep({ name: 7, sweep: { x: [1] }, stages: [{ name: 's', command: 'echo ${sweep.x}', env: ['A'] }, 'junk'] });
    expect(job).toEqual({ name: 7, stages: [{ name: 's', command: 'echo ${sweep.x}', env: ['A'] }, 'junk'] });
  });
});
