import { describe, expect, it } from 'vitest';
import { parseJobBatchText } from '../spec/job-spec-text.js';
import { MAX_BATCH_ISSUES, MAX_BATCH_STAGES, parseJobBatch } from './job-batch.js';
import { parseJobSpec } from './job-spec.js';
import { issuesOf } from '../../test/support/validation-issues.js';

const spec = (name: string, stages = 1) => ({ name, stages: Array.from({ length: stages }, (_, i) => ({ name: `s${i}`, command: ['true'] })) });

describe('parseJobBatch', () => {
  it('validates every spec as parseJobSpec does and keeps the order', () => {
    expect(parseJobBatch({ jobs: [spec('b'), spec('a')] })).toEqual([parseJobSpec(spec('b')), parseJobSpec(spec('a'))]);
  });

  it("prefixes each spec's issues with its index, for every bad spec", () => {
    const bad = { name: 'x', stages: [{ name: 's', command: [] }] };
    expect(issuesOf(() => parseJobBatch({ jobs: [spec('ok'), bad, 'nope'] }))).toEqual([
      { path: '/jobs/1/stages/0/command', message: 'must not be empty' },
      { path: '/jobs/2', message: expect.stringContaining('must be a mapping') },
    ]);
  });

  it('caps what it reports, and says how much more there is', () => {
    const bad = { name: 'x', stages: [{ name: 's', command: [] }] };
    const issues = issuesOf(() => parseJobBatch({ jobs: Array.from({ length: MAX_BATCH_ISSUES + 5 }, () => bad) }));
    expect(issues).toHaveLength(MAX_BATCH_ISSUES + 1);
    expect(issues.at(-1)).toEqual({ path: '/jobs', message: `and 5 more problem(s); ${MAX_BATCH_ISSUES + 5} of ${MAX_BATCH_ISSUES + 5} jobs are invalid` });
  });

  it('bounds the stages of a whole batch', () => {
    const jobs = Array.from({ length: MAX_BATCH_STAGES / 1000 + 1 }, (_, i) => spec(`j${i}`, 1000));
    expect(issuesOf(() => parseJobBatch({ jobs }))).toEqual([{ path: '/jobs', message: expect.stringContaining(`at most ${MAX_BATCH_STAGES}`) }]);
  });

  it('reads YAML text with a jobs list', () => {
    expect(parseJobBatch(parseJobBatchText('jobs:\n  - name: a\n    stages: [{ name: s0, command: ["true"] }]\n'))).toEqual([parseJobSpec(spec('a'))]);
    expect(issuesOf(() => parseJobBatchText(''))).toEqual([{ path: '', message: 'the batch is empty' }]);
  });
});
