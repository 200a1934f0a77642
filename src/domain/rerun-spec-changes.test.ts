import { describe, expect, it } from 'vitest';
import { parseJobSpec } from './job-spec.js';
import { rerunSpecIssues } from './rerun-spec-changes.js';

describe('rerunSpecIssues', () => {
  const spec = (evalCommand: string[], extra: Record<string, unknown> = {}) =>
    parseJobSpec({
      name: 'p',
      stages: [
        { name: 'train', command: ['python3', 'train.py'], resources: { gpu: { count: 2 } } },
        { name: 'eval', needs: ['train'], command: evalCommand, ...extra },
      ],
    });
  const original = spec(['python3', 'eval.py']);

  it('lets the stages that run again change how they run, and nothing of the reused ones', () => {
    const fixed = spec(['python3', 'eval.py', '--fixed'], { env: { CONFIG: 'x' }, resources: { cpu: 4, memory: '8Gi' }, timeoutSeconds: 60 });
    expect(rerunSpecIssues({ jobId: 'j', original, next: fixed, reused: new Set(['train']) })).toEqual([]);
    expect(rerunSpecIssues({ jobId: 'j', original, next: fixed, reused: new Set(['train', 'eval']) }).map((i) => i.path)).toEqual([
      '/spec/stages/1/resources',
      '/spec/stages/1/command',
      '/spec/stages/1/env',
      '/spec/stages/1/timeoutSeconds',
    ]);
  });

  it('a default written out is no change', () => {
    const explicit = parseJobSpec({
      name: 'p',
      stages: [
        {
          name: 'train',
          command: ['python3', 'train.py'],
          resources: { cpu: 1, memory: '512Mi', gpu: { count: 2 } },
          retry: { maxAttempts: 3 },
          preemptible: false,
        },
        { name: 'eval', needs: ['train'], command: ['python3', 'eval.py'] },
      ],
    });
    expect(rerunSpecIssues({ jobId: 'j', original, next: explicit, reused: new Set(['train', 'eval']) })).toEqual([]);
  });

  it("refuses a change of the job's name or team, or of the DAG's shape, naming the stage", () => {
    const other = parseJobSpec({ name: 'q', team: 'ml', stages: ['train', 'eval', 'new'].map((name) => ({ name, command: ['true'] })) });
    const issues = rerunSpecIssues({ jobId: 'j', original, next: other, reused: new Set() });
    expect(issues.map((i) => i.path)).toEqual(['/spec/name', '/spec/team', '/spec/stages/1/needs', '/spec/stages/2/name']);
    expect(issues[2]!.message).toMatch(/stage eval needs \[train\] in job j: a rerun cannot change the DAG's shape/);
    const fewer = parseJobSpec({ name: 'p', stages: [{ name: 'train', command: ['true'] }] });
    expect(rerunSpecIssues({ jobId: 'j', original, next: fewer, reused: new Set() })).toEqual([
      { path: '/spec/stages', message: "stage eval of job j is missing: a rerun keeps the job's stages (the DAG's shape cannot change)" },
    ]);
  });

  it('a definition stored before limits and network existed reads as their defaults: no change; a reused stage cannot change them', () => {
    const stored = { ...original, stages: original.stages.map(({ limits: _l, network: _n, ...s }) => s) };
    expect(stored.stages[1]).not.toHaveProperty('limits');
    expect(rerunSpecIssues({ jobId: 'j', original: stored, next: original, reused: new Set(['train', 'eval']) })).toEqual([]);
    const limited = spec(['python3', 'eval.py'], { limits: { memory: '1Gi' }, network: true });
    expect(rerunSpecIssues({ jobId: 'j', original: stored, next: limited, reused: new Set(['train']) })).toEqual([]);
    expect(rerunSpecIssues({ jobId: 'j', original: stored, next: limited, reused: new Set(['train', 'eval']) }).map((i) => i.path)).toEqual([
      '/spec/stages/1/limits',
      '/spec/stages/1/network',
    ]);
  });
});
