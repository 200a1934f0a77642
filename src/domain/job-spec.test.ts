import { describe, expect, it } from 'vitest';
import { parseJobSpecText } from '../spec/job-spec-text.js';
import { MAX_SPEC_BYTES } from '../spec/spec-limits.js';
import type { ValidationIssue } from '../spec/validation-error.js';
import { DEFAULT_RETRY, MAX_STAGES } from './job-definition.js';
import { JobSpecSchema, parseJobSpec, stageOrder } from './job-spec.js';
import { issuesOf } from '../../test/support/validation-issues.js';

const FULL = `
name: resnet-pipeline        # required
team: vision
priority: 50
labels: { project: demo }
retry: { maxAttempts: 3, backoff: { initialSeconds: 5, maxSeconds: 300 }, onExitCodes: [1, 137], maxLost: 5 }
stages:
  - name: preprocess
    resources: { cpu: 2, memory: 2Gi }
    command: ["sh", "-c", "echo hi"]
  - name: train
    needs: [preprocess]
    resources: { cpu: 4, memory: 8Gi, gpu: { count: 2, type: h100 } }
    placement: { region: us-east, labels: { nvlink: "true" } }
    timeoutSeconds: 3600
    env: { EPOCHS: "3" }
    retry: { maxAttempts: 1 }
    preemptible: false
    limits: { memory: 12Gi, cpu: "6", pids: 8192 }
    network: true
    command: [python, train.py]
`;

/** Issues for a spec built from a minimal valid one. */
function issues(spec: Record<string, unknown>): ValidationIssue[] {
  return issuesOf(() => parseJobSpec(spec));
}

const stage = (name: string, extra: Record<string, unknown> = {}) => ({ name, command: ['run'], ...extra });
const job = (stages: unknown[], extra: Record<string, unknown> = {}) => ({ name: 'j', stages, ...extra });

function expectIssue(list: ValidationIssue[], path: string, message: string | RegExp): void {
  const hit = list.find((i) => i.path === path && (typeof message === 'string' ? i.message.includes(message) : message.test(i.message)));
  expect(hit, `no issue at ${path} matching ${String(message)} in ${JSON.stringify(list)}`).toBeDefined();
}

describe('parseJobSpec: a valid spec', () => {
  it('normalises the full example', () => {
    const def = parseJobSpec(parseJobSpecText(FULL));
    expect(def).toEqual({
      name: 'resnet-pipeline',
      team: 'vision',
      priority: 50,
      labels: { project: 'demo' },
      stages: [
        {
          name: 'preprocess',
          needs: [],
          resources: { cpuMillis: 2000, memoryBytes: 2 * 1024 ** 3, gpu: null },
          placement: { region: null, labels: {} },
          command: ['sh', '-c', 'echo hi'],
          env: {},
          timeoutSeconds: null,
          disconnectGraceSeconds: null,
          retry: { maxAttempts: 3, backoff: { initialSeconds: 5, maxSeconds: 300 }, onExitCodes: [1, 137], maxLost: 5 },
          preemptible: false,
          limits: { memoryBytes: null, cpuMillis: null, pids: null },
          network: false,
        },
        {
          name: 'train',
          needs: ['preprocess'],
          resources: { cpuMillis: 4000, memoryBytes: 8 * 1024 ** 3, gpu: { count: 2, types: ['h100'] } },
          placement: { region: 'us-east', labels: { nvlink: 'true' } },
          command: ['python', 'train.py'],
          env: { EPOCHS: '3' },
          timeoutSeconds: 3600,
          disconnectGraceSeconds: null,
          retry: { maxAttempts: 1, backoff: { initialSeconds: 5, maxSeconds: 300 }, onExitCodes: [1, 137], maxLost: 5 },
          preemptible: false,
          limits: { memoryBytes: 12 * 1024 ** 3, cpuMillis: 6000, pids: 8192 },
          network: true,
        },
      ],
    });
    expect(stageOrder(def)).toEqual(['preprocess', 'train']);
  });

  it('fills in every default', () => {
    const def = parseJobSpec(job([stage('only')]));
    expect(def.team).toBe('default');
    expect(def.priority).toBe(50);
    expect(def.labels).toEqual({});
    expect(def.stages[0]).toEqual({
      name: 'only',
      needs: [],
      resources: { cpuMillis: 1000, memoryBytes: 512 * 1024 ** 2, gpu: null },
      placement: { region: null, labels: {} },
      command: ['run'],
      env: {},
      timeoutSeconds: null,
      disconnectGraceSeconds: null,
      retry: DEFAULT_RETRY,
      preemptible: false,
      limits: { memoryBytes: null, cpuMillis: null, pids: null },
      network: false,
    });
    expect(def.stages[0]!.retry).not.toBe(DEFAULT_RETRY);
  });

  it('defaults a field omitted from resources, and accepts string quantities', () => {
    const def = parseJobSpec(job([stage('a', { resources: { cpu: '500m' } }), stage('b', { resources: { memory: 1_000_000, cpu: '2' } })]));
    expect(def.stages[0]!.resources).toEqual({ cpuMillis: 500, memoryBytes: 512 * 1024 ** 2, gpu: null });
    expect(def.stages[1]!.resources).toEqual({ cpuMillis: 2000, memoryBytes: 1_000_000, gpu: null });
  });

  it('merges retry field by field: stage over job over default', () => {
    const def = parseJobSpec(
      job([stage('a'), stage('b', { retry: { backoff: { maxSeconds: 60 }, maxLost: 0 } })], {
        retry: { maxAttempts: 5, backoff: { initialSeconds: 10 } },
      }),
    );
    expect(def.stages[0]!.retry).toEqual({ maxAttempts: 5, backoff: { initialSeconds: 10, maxSeconds: 300 }, onExitCodes: null, maxLost: 5 });
    expect(def.stages[1]!.retry).toEqual({ maxAttempts: 5, backoff: { initialSeconds: 10, maxSeconds: 60 }, onExitCodes: null, maxLost: 0 });
  });

  it('normalises GPU types: case, lists, empty meaning any', () => {
    const gpu = (g: unknown) => parseJobSpec(job([stage('a', { resources: { gpu: g } })])).stages[0]!.resources.gpu;
    expect(gpu({ count: 1, type: ' H100 ' })).toEqual({ count: 1, types: ['h100'] });
    expect(gpu({ count: 8, type: ['H100', 'a100', 'h100'] })).toEqual({ count: 8, types: ['h100', 'a100'] });
    expect(gpu({ count: 1 })).toEqual({ count: 1, types: [] });
    expect(gpu({ count: 1, type: '' })).toEqual({ count: 1, types: [] });
    expect(gpu({ count: 1, type: [] })).toEqual({ count: 1, types: [] });
  });

  it('reads a share of one GPU in thousandths, and GPU memory in bytes', () => {
    const gpu = (g: unknown) => parseJobSpec(job([stage('a', { resources: { gpu: g } })])).stages[0]!.resources.gpu;
    expect(gpu({ count: 0.25, type: 't4' })).toEqual({ count: 1, milli: 250, types: ['t4'] });
    expect(gpu({ count: 0.1 })).toEqual({ count: 1, milli: 100, types: [] });
    expect(gpu({ count: 0.001 })).toEqual({ count: 1, milli: 1, types: [] });
    expect(gpu({ count: 0.999 })).toEqual({ count: 1, milli: 999, types: [] });
    expect(gpu({ count: 0.5, memory: '10Gi' })).toEqual({ count: 1, milli: 500, memoryBytes: 10 * 1024 ** 3, types: [] });
    // Memory alone: one GPU with at least that much memory.
    expect(gpu({ memory: '10Gi' })).toEqual({ count: 1, memoryBytes: 10 * 1024 ** 3, types: [] });
    expect(gpu({ count: 2, memory: '80Gi' })).toEqual({ count: 2, memoryBytes: 80 * 1024 ** 3, types: [] });
  });

  it('refuses a share of more than one GPU, or finer than a thousandth, naming the path', () => {
    for (const count of [1.5, 2.5, 63.9]) {
      expectIssue(
        issues(job([stage('a', { resources: { gpu: { count } } })])),
        '/stages/0/resources/gpu/count',
        'a share is of one GPU only; use a whole number of GPUs, or a share below 1',
      );
    }
    expectIssue(issues(job([stage('a', { resources: { gpu: { count: 0.0001 } } })])), '/stages/0/resources/gpu/count', 'at most 3 decimal places');
    expectIssue(issues(job([stage('a', { resources: { gpu: { count: 0.2505 } } })])), '/stages/0/resources/gpu/count', 'at most 3 decimal places');
    expectIssue(issues(job([stage('a', { resources: { gpu: {} } })])), '/stages/0/resources/gpu/count', 'needs a count');
    expectIssue(issues(job([stage('a', { resources: { gpu: { count: 0.5, memory: '10 parsecs' } } })])), '/stages/0/resources/gpu/memory', 'memory');
    expectIssue(issues(job([stage('a', { resources: { gpu: { count: 0.5, memory: 0 } } })])), '/stages/0/resources/gpu/memory', 'positive number of bytes');
  });

  it('keeps a "__proto__" label as a plain key', () => {
    const spec = JSON.parse('{"name":"j","labels":{"__proto__":"x"},"stages":[{"name":"a","command":["x"]}]}');
    const def = parseJobSpec(spec);
    expect(Object.keys(def.labels)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(def.labels)).toBe(Object.prototype);
  });

  it('exports a plain JSON Schema with closed objects', () => {
    const json = JSON.parse(JSON.stringify(JobSpecSchema));
    expect(json.additionalProperties).toBe(false);
    expect(json.properties.stages.items.additionalProperties).toBe(false);
    expect(json.properties.stages.items.properties.resources.additionalProperties).toBe(false);
    expect(json.properties.stages.maxItems).toBe(MAX_STAGES);
  });
});

describe('parseJobSpec: rejections', () => {
  it('rejects an unknown field, naming it', () => {
    const list = issues(job([stage('a'), stage('b', { resurces: { cpu: 1 } })]));
    expectIssue(list, '/stages/1/resurces', 'unknown field "resurces"');
    expectIssue(list, '/stages/1/resurces', 'did you mean "resources"');
  });

  it('rejects unknown fields at every level', () => {
    const list = issues(job([stage('a', { resources: { gpu: { count: 1, model: 'h100' } }, retry: { backoff: { initial: 1 } } })], { owner: 'me' }));
    expectIssue(list, '/owner', 'unknown field "owner"');
    expectIssue(list, '/stages/0/resources/gpu/model', 'unknown field "model"');
    expectIssue(list, '/stages/0/retry/backoff/initial', 'unknown field "initial"');
  });

  it('rejects missing required fields', () => {
    const list = issues({ stages: [{ name: 'a' }] });
    expectIssue(list, '/name', 'missing required field "name"');
    expectIssue(list, '/stages/0/command', 'missing required field "command"');
    expectIssue(issues({ name: 'j' }), '/stages', 'missing required field "stages"');
  });

  it('rejects wrong types', () => {
    const list = issues(job([stage('a', { command: 'echo hi', preemptible: 'no', timeoutSeconds: 1.5 })], { priority: 'high' }));
    expectIssue(list, '/priority', 'must be an integer');
    expectIssue(list, '/stages/0/command', 'must be a list of strings');
    expectIssue(list, '/stages/0/preemptible', 'must be true or false');
    expectIssue(list, '/stages/0/timeoutSeconds', 'must be an integer, got the number 1.5');
  });

  it('rejects a spec that is not a mapping', () => {
    expectIssue(
      issuesOf(() => parseJobSpec([1, 2])),
      '',
      'must be a mapping',
    );
  });

  it('rejects bad names and out-of-range numbers', () => {
    const list = issues(job([stage('-bad'), stage('x'.repeat(101))], { name: 'has space', team: '', priority: 1001 }));
    expectIssue(list, '/name', 'must start with a letter or digit');
    expectIssue(list, '/team', 'must not be empty');
    expectIssue(list, '/priority', 'between 0 and 1000');
    expectIssue(list, '/stages/0/name', 'must start with a letter or digit');
    expectIssue(list, '/stages/1/name', 'at most 100 characters');
    expectIssue(issues(job([stage('a', { timeoutSeconds: 0 })])), '/stages/0/timeoutSeconds', 'between 1 and');
    expectIssue(issues(job([stage('a', { disconnectGraceSeconds: -1 })])), '/stages/0/disconnectGraceSeconds', 'between 0 and');
  });

  it('rejects an empty command or an empty program', () => {
    expectIssue(issues(job([stage('a', { command: [] })])), '/stages/0/command', 'must not be empty');
    expectIssue(issues(job([stage('a', { command: ['', 'x'] })])), '/stages/0/command/0', 'must not be empty');
  });

  it.each([
    ['memory', '2Gb', 'not a memory quantity'],
    ['cpu', -1, 'CPU must be a positive number'],
    ['cpu', 'abc', '"abc" is not a CPU quantity'],
    ['memory', 0, 'memory must be a positive number'],
    ['cpu', 0.0001, 'less than 1 millicore'],
  ])('rejects a bad quantity %s: %j', (field, value, message) => {
    expectIssue(issues(job([stage('a', { resources: { [field]: value } })])), `/stages/0/resources/${field}`, message);
  });

  it('rejects a quantity of the wrong type', () => {
    expectIssue(issues(job([stage('a', { resources: { cpu: true } })])), '/stages/0/resources/cpu', 'must be a number or a string');
  });

  it('rejects a bad GPU request', () => {
    const list = issues(job([stage('a', { resources: { gpu: { count: 0 } } }), stage('b', { resources: { gpu: { count: 65, type: 3 } } })]));
    expectIssue(list, '/stages/0/resources/gpu/count', 'positive and at most 64');
    expectIssue(list, '/stages/1/resources/gpu/count', 'positive and at most 64');
    expectIssue(list, '/stages/1/resources/gpu/type', 'must be a string or a list of strings');
    expectIssue(issues(job([stage('a', { resources: { gpu: 2 } })])), '/stages/0/resources/gpu', 'must be a mapping');
    expectIssue(issues(job([stage('a', { resources: { gpu: { count: 1, type: ['h100', ' '] } } })])), '/stages/0/resources/gpu/type/1', 'must not be empty');
  });

  it('rejects duplicate stage names at the second occurrence', () => {
    const list = issues(job([stage('a'), stage('b'), stage('c'), stage('b')]));
    expect(list).toEqual([{ path: '/stages/3/name', message: expect.stringContaining('duplicate stage name "b"') }]);
  });

  it('rejects a need naming an unknown stage', () => {
    const list = issues(job([stage('prep'), stage('train'), stage('eval', { needs: ['trian'] })]));
    expectIssue(list, '/stages/2/needs/0', 'unknown stage "trian"');
    expectIssue(list, '/stages/2/needs/0', 'did you mean "train"');
  });

  it('rejects a timeout longer than a timer can wait, and a backoff over a week', () => {
    expectIssue(issues(job([stage('a', { timeoutSeconds: 30 * 24 * 3600 })])), '/stages/0/timeoutSeconds', /2147483/);
    const big = issues(job([stage('a')], { retry: { backoff: { initialSeconds: 2e13, maxSeconds: 2e13 } } }));
    expectIssue(big, '/retry/backoff/initialSeconds', /at most 604800/);
    expectIssue(big, '/retry/backoff/maxSeconds', /604800/);
  });

  it('rejects a stage needing itself', () => {
    expectIssue(issues(job([stage('a'), stage('b', { needs: ['a', 'b'] })])), '/stages/1/needs/1', 'stage "b" cannot need itself');
  });

  it('rejects a cycle, naming it in order', () => {
    // a needs c, b needs a, c needs b: a before b before c before a.
    const list = issues(job([stage('x'), stage('a', { needs: ['c', 'x'] }), stage('b', { needs: ['a'] }), stage('c', { needs: ['b'] })]));
    expect(list).toEqual([{ path: '/stages', message: expect.stringContaining('cycle: a -> b -> c -> a') }]);
  });

  it('rejects more than MAX_STAGES stages, saying the limit', () => {
    const stages = Array.from({ length: MAX_STAGES + 1 }, (_, i) => stage(`s${i}`));
    expect(issues(job(stages))).toEqual([{ path: '/stages', message: expect.stringContaining(`at most ${MAX_STAGES}`) }]);
    expect(parseJobSpec(job(stages.slice(0, MAX_STAGES))).stages).toHaveLength(MAX_STAGES);
  });

  it('rejects bad retry settings', () => {
    const list = issues(
      job([stage('a', { retry: { maxAttempts: 101 } }), stage('b', { retry: { onExitCodes: [1, 256, -1, 1.5] } })], {
        retry: { maxAttempts: 0, backoff: { initialSeconds: 0, maxSeconds: -1 }, maxLost: 101 },
      }),
    );
    expectIssue(list, '/retry/maxAttempts', 'between 1 and 100');
    expectIssue(list, '/retry/backoff/initialSeconds', 'must be positive and at most 604800');
    expectIssue(list, '/retry/backoff/maxSeconds', 'must be positive and at most 604800');
    expectIssue(list, '/retry/maxLost', 'between 0 and 100');
    expectIssue(list, '/stages/0/retry/maxAttempts', 'between 1 and 100');
    expectIssue(list, '/stages/1/retry/onExitCodes/1', 'between 0 and 255');
    expectIssue(list, '/stages/1/retry/onExitCodes/2', 'between 0 and 255');
    expectIssue(list, '/stages/1/retry/onExitCodes/3', 'must be an integer');
    expectIssue(issues(job([stage('a', { retry: { maxAttempts: 2.5 } })])), '/stages/0/retry/maxAttempts', 'must be an integer');
  });

  it('rejects backoff maxSeconds below initialSeconds, including after merging', () => {
    expectIssue(
      issues(job([stage('a')], { retry: { backoff: { initialSeconds: 60, maxSeconds: 10 } } })),
      '/retry/backoff/maxSeconds',
      'maxSeconds (10) must be >= initialSeconds (60)',
    );
    // The stage's initialSeconds is above the job's (default) maxSeconds of 300.
    expectIssue(
      issues(job([stage('a', { retry: { backoff: { initialSeconds: 600 } } })])),
      '/stages/0/retry/backoff/initialSeconds',
      'maxSeconds (300) must be >= initialSeconds (600)',
    );
  });

  it('rejects bad env names, GANTRY_ names and CUDA_VISIBLE_DEVICES', () => {
    const list = issues(job([stage('a', { env: { OK_1: 'x', '1BAD': 'x', 'A-B': 'x', GANTRY_JOB: 'x', CUDA_VISIBLE_DEVICES: '0', N: 3 } })]));
    expectIssue(list, '/stages/0/env/1BAD', 'not a valid environment variable name');
    expectIssue(list, '/stages/0/env/A-B', 'not a valid environment variable name');
    expectIssue(list, '/stages/0/env/GANTRY_JOB', 'reserved');
    expectIssue(list, '/stages/0/env/CUDA_VISIBLE_DEVICES', 'set by Gantry');
    expectIssue(list, '/stages/0/env/N', 'must be a string');
    expect(list.some((i) => i.path.endsWith('/OK_1'))).toBe(false);
  });

  it('rejects non-string label values, escaping the key in the path', () => {
    expectIssue(issues(job([stage('a', { placement: { labels: { 'a/b': 1 } } })])), '/stages/0/placement/labels/a~1b', 'must be a string');
  });

  it('reports all issues at once', () => {
    const list = issues(job([stage('a', { resurces: {} }), stage('a', { needs: ['zz'], resources: { memory: '2Gb' } })], { priority: -1 }));
    expect(list.map((i) => i.path).sort()).toEqual(
      ['/priority', '/stages/0/resurces', '/stages/1/name', '/stages/1/needs/0', '/stages/1/resources/memory'].sort(),
    );
  });
});

describe('parseJobSpecText', () => {
  it('parses YAML and JSON', () => {
    expect(parseJobSpecText('name: j\nstages: []\n')).toEqual({ name: 'j', stages: [] });
    expect(parseJobSpecText('{"name": "j", "stages": []}')).toEqual({ name: 'j', stages: [] });
  });

  it('reports a syntax error with line and column', () => {
    const list = issuesOf(() => parseJobSpecText('name: j\nstages:\n  - name: [a, b\n', 'job.yaml'));
    expect(list.length).toBeGreaterThan(0);
    expect(list[0]!.path).toBe('');
    expect(list[0]!.message).toMatch(/^job\.yaml: line \d+, column \d+: /);
    const tabs = issuesOf(() => parseJobSpecText('name: j\nstages:\n  - name: a\n    command: [x]\n   bad: : :\n'));
    expect(tabs[0]!.message).toMatch(/line 5, column \d+/);
  });

  it('rejects duplicate keys', () => {
    expect(issuesOf(() => parseJobSpecText('name: a\nname: b\n'))[0]!.message).toMatch(/line 2, column 1: .*unique/);
  });

  it('rejects a document that is not a mapping, or is empty', () => {
    expect(issuesOf(() => parseJobSpecText('- a\n- b\n'))[0]!.message).toContain('must be a mapping');
    expect(issuesOf(() => parseJobSpecText('just a string'))[0]!.message).toContain('must be a mapping');
    expect(issuesOf(() => parseJobSpecText('# nothing\n'))[0]!.message).toContain('empty');
  });

  it('rejects text over MAX_SPEC_BYTES', () => {
    const big = `name: j\nlabels:\n  pad: "${'x'.repeat(MAX_SPEC_BYTES)}"\nstages: []\n`;
    const list = issuesOf(() => parseJobSpecText(big, 'big.yaml'));
    expect(list).toEqual([{ path: '', message: expect.stringMatching(/^big\.yaml: spec is \d+ bytes; the limit is 1048576 bytes/) }]);
  });

  it('rejects alias bombs', () => {
    const bomb = [
      'a: &a [x, x, x, x, x, x, x, x, x, x]',
      ...Array.from(
        { length: 10 },
        (_, i) =>
          `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [${Array(10)
            .fill(`*${String.fromCharCode(97 + i)}`)
            .join(', ')}]`,
      ),
    ].join('\n');
    expect(issuesOf(() => parseJobSpecText(bomb))).toEqual([{ path: '', message: expect.stringContaining('alias') }]);
  });
});

describe('parseJobSpec: limits (docs/security.md)', () => {
  it('refuses what an exec cannot take: a NUL in an argument or a value, a command or an environment too large', () => {
    const list = issues(job([stage('a', { command: ['run', 'a\u0000b'], env: { A: 'x\u0000y' } })]));
    expectIssue(list, '/stages/0/command/1', 'cannot hold a NUL character');
    expectIssue(list, '/stages/0/env/A', 'cannot hold a NUL character');
    expectIssue(issues(job([stage('a', { command: ['run', 'x'.repeat(200_000)] })])), '/stages/0/command', /bytes; at most 131072/);
    const big = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`V${i}`, 'x'.repeat(2000)]));
    expectIssue(issues(job([stage('a', { env: big })])), '/stages/0/env', /env and secretEnv hold \d+ bytes; at most 65536/);
    expectIssue(
      issues(job([stage('a', { env: Object.fromEntries(Array.from({ length: 1001 }, (_, i) => [`V${i}`, '1'])) })])),
      '/stages/0/env',
      /more than 1000 properties/,
    );
    expectIssue(
      issues(job([stage('a')], { labels: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`l${i}`, '1'])) })),
      '/labels',
      /more than 100 properties/,
    );
  });

  it('keeps secretEnv apart: its names checked as env names, none in env too', () => {
    const d = parseJobSpec(job([stage('a', { env: { MODE: 'fast' }, secretEnv: { API_KEY: 'k-123456' } }), stage('b')]));
    expect(d.stages[0]!.secretEnv).toEqual({ API_KEY: 'k-123456' });
    expect(d.stages[0]!.env).toEqual({ MODE: 'fast' });
    expect(d.stages[1]!.secretEnv).toBeUndefined();
    expectIssue(issues(job([stage('a', { env: { K: '1' }, secretEnv: { K: '2' } })])), '/stages/0/secretEnv/K', 'K is in env too');
    expectIssue(issues(job([stage('a', { secretEnv: { GANTRY_X: '1' } })])), '/stages/0/secretEnv/GANTRY_X', 'reserved for Gantry');
  });
});

describe('parseJobSpec: containment (docs/containment.md)', () => {
  const limitsOf = (extra: Record<string, unknown>) => parseJobSpec(job([stage('a', extra)])).stages[0]!;

  it('keeps limits above the request in bytes, millicores and a count, and the network asked for', () => {
    const s = limitsOf({ resources: { cpu: 2, memory: '2Gi' }, limits: { memory: '3Gi', cpu: '2500m', pids: 64 }, network: true });
    expect(s.limits).toEqual({ memoryBytes: 3 * 1024 ** 3, cpuMillis: 2500, pids: 64 });
    expect(s.network).toBe(true);
    // A limit equal to the request is allowed (a cap at what was reserved), and a part left out is null.
    expect(limitsOf({ resources: { memory: '1Gi' }, limits: { memory: 2 ** 30 } }).limits).toEqual({ memoryBytes: 2 ** 30, cpuMillis: null, pids: null });
    // Against the default request when the stage gives none.
    expect(limitsOf({ limits: { memory: '512Mi', cpu: 1 } }).limits).toEqual({ memoryBytes: 512 * 1024 ** 2, cpuMillis: 1000, pids: null });
    expect(limitsOf({ limits: {} }).limits).toEqual({ memoryBytes: null, cpuMillis: null, pids: null });
  });

  it('refuses a limit below the request, naming both, the default included', () => {
    const list = issues(job([stage('a', { resources: { cpu: 4, memory: '8Gi' }, limits: { memory: '4Gi', cpu: 2 } })]));
    expectIssue(list, '/stages/0/limits/memory', '4Gi must be at least resources.memory (8Gi)');
    expectIssue(list, '/stages/0/limits/cpu', '2 must be at least resources.cpu (4)');
    expectIssue(
      issues(job([stage('a', { limits: { memory: '256Mi' } })])),
      '/stages/0/limits/memory',
      'must be at least resources.memory (512Mi, the default)',
    );
    expectIssue(issues(job([stage('a', { limits: { cpu: '500m' } })])), '/stages/0/limits/cpu', '500m must be at least resources.cpu (1, the default)');
    // A request that is itself wrong is reported where it is, and not compared.
    const bad = issues(job([stage('a', { resources: { memory: 'lots' }, limits: { memory: '1Gi' } })]));
    expectIssue(bad, '/stages/0/resources/memory', 'is not a memory quantity');
    expect(bad.filter((i) => i.path === '/stages/0/limits/memory')).toEqual([]);
  });

  it('refuses a bad quantity, pids out of range, an unknown field with a suggestion, and a network that is not a boolean', () => {
    expectIssue(issues(job([stage('a', { limits: { memory: '3 bananas' } })])), '/stages/0/limits/memory', 'is not a memory quantity');
    expectIssue(issues(job([stage('a', { limits: { cpu: 0 } })])), '/stages/0/limits/cpu', 'CPU must be a positive number');
    expectIssue(issues(job([stage('a', { limits: { pids: 8 } })])), '/stages/0/limits/pids', /16/);
    expectIssue(issues(job([stage('a', { limits: { pids: 5_000_000 } })])), '/stages/0/limits/pids', /4194304/);
    expectIssue(issues(job([stage('a', { limits: { pids: 100.5 } })])), '/stages/0/limits/pids', 'must be an integer');
    const typo = issues(job([stage('a', { limits: { memroy: '1Gi' } })]));
    expectIssue(typo, '/stages/0/limits/memroy', 'unknown field "memroy"');
    expectIssue(typo, '/stages/0/limits/memroy', 'did you mean "memory"');
    expectIssue(issues(job([stage('a', { limit: { memory: '1Gi' } })])), '/stages/0/limit', 'did you mean "limits"');
    expectIssue(issues(job([stage('a', { network: 'yes' })])), '/stages/0/network', 'true or false');
  });

  it("keeps limits.outputs in bytes and files (absent: the server's defaults), and names what is wrong in it", () => {
    expect(limitsOf({ limits: { outputs: { bytes: '256Mi', files: 10 } } }).outputLimits).toEqual({ bytes: 256 * 1024 ** 2, files: 10 });
    expect(limitsOf({ limits: { outputs: { files: 3 } } }).outputLimits).toEqual({ bytes: null, files: 3 });
    expect(limitsOf({ limits: { outputs: { bytes: 4096 } } }).outputLimits).toEqual({ bytes: 4096, files: null });
    expect(limitsOf({ limits: { memory: '1Gi' } })).not.toHaveProperty('outputLimits');
    expectIssue(issues(job([stage('a', { limits: { outputs: { bytes: 'huge' } } })])), '/stages/0/limits/outputs/bytes', 'is not a memory quantity');
    expectIssue(issues(job([stage('a', { limits: { outputs: { bytes: 0 } } })])), '/stages/0/limits/outputs/bytes', 'must be a positive number');
    expectIssue(issues(job([stage('a', { limits: { outputs: { files: 0 } } })])), '/stages/0/limits/outputs/files', /1/);
    expectIssue(issues(job([stage('a', { limits: { outputs: { byte: 10 } } })])), '/stages/0/limits/outputs/byte', 'did you mean "bytes"');
  });
});

describe('parseJobSpec: gangs (issue 31, docs/gangs.md)', () => {
  const gpu = { count: 8, type: 'h100' };

  it('keeps machines and sameLabel on a gang', () => {
    const def = parseJobSpec(job([stage('train', { resources: { machines: 4, gpu, cpu: 32, memory: '256Gi' }, placement: { sameLabel: 'rack' } })]));
    const s = def.stages[0]!;
    expect(s.resources).toEqual({ cpuMillis: 32_000, memoryBytes: 256 * 1024 ** 3, gpu: { count: 8, types: ['h100'] }, machines: 4 });
    expect(s.placement).toEqual({ region: null, labels: {}, sameLabel: 'rack' });
  });

  it('writes machines: 1 exactly as a stage without it (an ordinary stage keeps its definition)', () => {
    const plain = parseJobSpec(job([stage('a', { resources: { gpu } })]));
    const one = parseJobSpec(job([stage('a', { resources: { gpu, machines: 1 } })]));
    expect(one).toEqual(plain);
    expect(JSON.stringify(one)).toBe(JSON.stringify(plain));
    expect('machines' in one.stages[0]!.resources).toBe(false);
  });

  it('refuses a machines count outside 1–64 or not whole', () => {
    expectIssue(issues(job([stage('a', { resources: { machines: 0 } })])), '/stages/0/resources/machines', 'must be between 1 and 64, got 0');
    expectIssue(issues(job([stage('a', { resources: { machines: 65 } })])), '/stages/0/resources/machines', 'must be between 1 and 64, got 65');
    expectIssue(issues(job([stage('a', { resources: { machines: 2.5 } })])), '/stages/0/resources/machines', 'integer');
  });

  it('refuses sameLabel on a stage of one machine, at its path', () => {
    const none = issues(job([stage('a', { placement: { sameLabel: 'rack' } })]));
    expectIssue(none, '/stages/0/placement/sameLabel', 'needs resources.machines of 2 or more (this stage runs on 1)');
    const one = issues(job([stage('a', { resources: { machines: 1 }, placement: { sameLabel: 'rack' } })]));
    expectIssue(one, '/stages/0/placement/sameLabel', 'needs resources.machines of 2 or more');
    expectIssue(issues(job([stage('a', { resources: { machines: 2 }, placement: { sameLabel: '' } })])), '/stages/0/placement/sameLabel', 'must not be empty');
  });

  it('says nothing of sameLabel when machines itself is wrong (reported once, where it is wrong)', () => {
    const list = issues(job([stage('a', { resources: { machines: 0 }, placement: { sameLabel: 'rack' } })]));
    expect(list.map((i) => i.path)).toEqual(['/stages/0/resources/machines']);
  });

  it("refuses a gang with a share of a GPU: a gang's members take whole GPUs", () => {
    const list = issues(job([stage('a', { resources: { machines: 2, gpu: { count: 0.5 } } })]));
    expectIssue(list, '/stages/0/resources/gpu/count', "a gang's members take whole GPUs");
    // One machine with a share is an ordinary share (issue 29).
    expect(parseJobSpec(job([stage('a', { resources: { machines: 1, gpu: { count: 0.5 } } })])).stages[0]!.resources.gpu).toEqual({
      count: 1,
      milli: 500,
      types: [],
    });
  });

  it('accepts a gang without GPUs (CPU ranks, as an MPI run)', () => {
    expect(parseJobSpec(job([stage('a', { resources: { machines: 3, cpu: 8 } })])).stages[0]!.resources.machines).toBe(3);
  });

  it('keeps outputs.ranks: all on a gang; ranks: 0, the default, is written as a stage without it', () => {
    const all = parseJobSpec(job([stage('train', { resources: { machines: 3 }, outputs: { ranks: 'all' } })]));
    expect(all.stages[0]!.outputs).toEqual({ ranks: 'all' });
    const plain = parseJobSpec(job([stage('train', { resources: { machines: 3 } })]));
    const zero = parseJobSpec(job([stage('train', { resources: { machines: 3 }, outputs: { ranks: 0 } })]));
    const empty = parseJobSpec(job([stage('train', { resources: { machines: 3 }, outputs: {} })]));
    expect(JSON.stringify(zero)).toBe(JSON.stringify(plain));
    expect(JSON.stringify(empty)).toBe(JSON.stringify(plain));
    expect('outputs' in plain.stages[0]!).toBe(false);
    // From YAML, as users write it: `all` is a plain word.
    const text = 'name: j\nstages:\n  - name: train\n    resources: { machines: 2 }\n    outputs: { ranks: all }\n    command: [run]\n';
    expect(parseJobSpec(parseJobSpecText(text)).stages[0]!.outputs).toEqual({ ranks: 'all' });
  });

  it('refuses outputs.ranks on a stage of one machine, at its path, whatever its value', () => {
    for (const ranks of ['all', 0]) {
      const list = issues(job([stage('train', { outputs: { ranks } })]));
      expectIssue(list, '/stages/0/outputs/ranks', 'only a gang stage (resources.machines 2 or more) has ranks: this stage runs on 1 machine');
      expect(list).toHaveLength(1);
    }
    expectIssue(issues(job([stage('a', { resources: { machines: 1 }, outputs: { ranks: 'all' } })])), '/stages/0/outputs/ranks', 'only a gang stage');
    // A machines count that is itself wrong is reported once, there.
    const wrong = issues(job([stage('a', { resources: { machines: 0 }, outputs: { ranks: 'all' } })]));
    expect(wrong.map((i) => i.path)).toEqual(['/stages/0/resources/machines']);
  });

  it('refuses a ranks value other than 0 or "all", and an unknown key of outputs', () => {
    const gang = (outputs: unknown) => issues(job([stage('a', { resources: { machines: 2 }, outputs })]));
    for (const ranks of [1, 'ALL', 'every', [0, 1], null, true]) {
      const list = gang({ ranks });
      expect(list.map((i) => i.path)).toEqual(['/stages/0/outputs/ranks']);
      expect(list[0]!.message).toMatch(/^must be 0 or "all", got /);
    }
    expectIssue(gang({ rank: 'all' }), '/stages/0/outputs/rank', 'did you mean "ranks"');
    expect(gang('all').map((i) => i.path)).toEqual(['/stages/0/outputs']);
  });
});
