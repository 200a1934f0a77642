import { describe, expect, it } from 'vitest';
import { parseJobFile } from './job-file.js';
import { parseJobSpecText } from './job-spec-text.js';
import { issuesOf } from '../../test/support/validation-issues.js';

const ONE = 'name: one\nstages:\n  - name: a\n    command: [echo, "${sweep.x}"]\n';

describe('parseJobFile', () => {
  it('one plain spec is a single job, read exactly as parseJobSpecText reads it', () => {
    expect(parseJobFile(ONE, 'f.yaml')).toEqual({ specs: [parseJobSpecText(ONE, 'f.yaml')], single: true });
    // Errors too: same messages, same limit.
    for (const text of ['', '- a\n', 'name: [\n', 'x'.repeat(1024 * 1024 + 1)]) {
      expect(issuesOf(() => parseJobFile(text, 'f.yaml'))).toEqual(issuesOf(() => parseJobSpecText(text, 'f.yaml')));
    }
  });

  it('a jobs: list is a batch, in order', () => {
    const file = parseJobFile('jobs:\n  - { name: a, stages: [] }\n  - { name: b, stages: [] }\n');
    expect(file).toEqual({
      specs: [
        { name: 'a', stages: [] },
        { name: 'b', stages: [] },
      ],
      single: false,
    });
    expect(issuesOf(() => parseJobFile('jobs: []\n'))).toEqual([{ path: '/jobs', message: 'must not be empty' }]);
    expect(issuesOf(() => parseJobFile('jobs: [{ name: a }]\nname: b\n'))[0]!.path).toBe('/name');
  });

  it('several documents are a batch, empty ones left out', () => {
    const file = parseJobFile(`${ONE}---\nname: two\nstages: []\n---\n`);
    expect(file.single).toBe(false);
    expect(file.specs.map((s) => (s as { name: string }).name)).toEqual(['one', 'two']);
    expect(issuesOf(() => parseJobFile(`${ONE}---\n- not a spec\n`))).toEqual([
      { path: 'document 2', message: 'a job spec must be a mapping (name: ..., stages: ...), got a list' },
    ]);
  });

  it('sweeps are expanded wherever they are; their problems name where they are', () => {
    const sweep = 'name: s\nsweep: { x: [1, 2] }\nstages: [{ name: a, command: [echo, "${sweep.x}"] }]\n';
    expect(parseJobFile(sweep).specs).toEqual([
      { name: 's-x_1', stages: [{ name: 'a', command: ['echo', '1'] }] },
      { name: 's-x_2', stages: [{ name: 'a', command: ['echo', '2'] }] },
    ]);
    expect(parseJobFile(`${ONE}---\n${sweep}`).specs).toHaveLength(3);
    expect(parseJobFile('jobs:\n  - name: s\n    sweep: { x: [1, 2, 3] }\n    stages: []\n  - { name: t, stages: [] }\n').specs).toHaveLength(4);
    expect(issuesOf(() => parseJobFile('name: s\nsweep: { x: [] }\nstages: []\n'))[0]!.path).toBe('/sweep/x');
    expect(issuesOf(() => parseJobFile('jobs:\n  - { name: t, stages: [] }\n  - { name: s, sweep: { x: [] }, stages: [] }\n'))[0]!.path).toBe(
      '/jobs/1/sweep/x',
    );
    expect(issuesOf(() => parseJobFile(`${ONE}---\nname: s\nsweep: { x: 1 }\nstages: []\n`))[0]!.path).toBe('document 2 /sweep/x');
  });

  it('refuses more than 10,000 jobs in all', () => {
    const values = `[${Array.from({ length: 100 }, (_, i) => i).join(', ')}]`;
    const sweep = `name: s\nsweep: { a: ${values}, b: ${values} }\nstages: []\n`;
    expect(parseJobFile(sweep).specs).toHaveLength(10_000);
    expect(issuesOf(() => parseJobFile(`${sweep}---\n${ONE}`, 'f.yaml'))).toEqual([
      { path: '', message: 'f.yaml: the file makes 10001 jobs; a batch may have at most 10000 (split the file, or the sweep)' },
    ]);
  });

  it('reports syntax errors with the file, line and column, in any document', () => {
    expect(issuesOf(() => parseJobFile(`${ONE}---\nname: [\n`, 'f.yaml'))[0]!.message).toMatch(/^f\.yaml: line \d+, column \d+: /);
  });
});
