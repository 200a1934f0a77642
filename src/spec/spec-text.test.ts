import { describe, expect, it } from 'vitest';
import { issuesOf } from '../../test/support/validation-issues.js';
import { SPEC_BOUNDS } from './spec-limits.js';
import { parseSpecDocuments } from './spec-text.js';

const read = (text: string, b: Partial<typeof SPEC_BOUNDS> = {}) =>
  parseSpecDocuments(text, { filename: 'f.yaml', bounds: { ...SPEC_BOUNDS, ...b }, what: 'spec' });

describe('parseSpecDocuments: bounds', () => {
  it('refuses a text over a bound before parsing it, naming the file, the bound and the line', () => {
    expect(issuesOf(() => read(`name: j\nstages: ${'['.repeat(1 << 19)}`))).toEqual([
      { path: '', message: 'f.yaml: line 2, column 40: the spec nests deeper than 32 levels (lists and mappings inside each other; a job spec needs about 6)' },
    ]);
    expect(issuesOf(() => read('a: [1, 2, 3]\n', { maxNodes: 3 }))[0]!.message).toMatch(/^f\.yaml: line 1, column 8: the spec has more than 3 values/);
  });

  it('finds every duplicate key, with its line, in any mapping (in one pass: the parser compares each key with every earlier one, minutes for 50,000 keys)', () => {
    expect(issuesOf(() => read('a: 1\nb:\n  x: 1\n  x: 2\na: 3\n'))).toEqual([
      { path: '', message: 'f.yaml: line 5, column 1: Map keys must be unique' },
      { path: '', message: 'f.yaml: line 4, column 3: Map keys must be unique' },
    ]);
    const keys = Array.from({ length: 50_000 }, (_, i) => `k${i}: v`);
    expect(Object.keys(read(`labels:\n${keys.map((k) => `  ${k}`).join('\n')}\n`, { maxNodes: 200_000 })[0] as object)).toEqual(['labels']);
    expect(issuesOf(() => read(`{${[...keys, 'k7: again'].join(', ')}}`, { maxNodes: 200_000 }))).toEqual([
      { path: '', message: expect.stringMatching(/^f\.yaml: line 1, column \d+: Map keys must be unique$/) },
    ]);
    // Each repeated key once, and at most 100 in all.
    expect(issuesOf(() => read(`a: 0\n${'a: 1\n'.repeat(5000)}`))).toEqual([{ path: '', message: 'f.yaml: line 2, column 1: Map keys must be unique' }]);
    expect(issuesOf(() => read(Array.from({ length: 300 }, (_, i) => `k${i}: 1\nk${i}: 2\n`).join('')))).toHaveLength(100);
    // A number and a string are different keys to the parser, as before (the object then holds the later).
    expect(read('1: a\n"1": b\n')).toEqual([{ 1: 'b' }]);
  });

  it('still refuses an alias expanding past the alias count when read', () => {
    const text = [
      'a: &a [x, x, x, x, x, x, x, x, x, x]',
      ...Array.from(
        { length: 9 },
        (_, i) =>
          `l${i}: &l${i} [${Array(10)
            .fill(i ? `*l${i - 1}` : '*a')
            .join(', ')}]`,
      ),
    ];
    expect(issuesOf(() => read(text.join('\n')))).toEqual([{ path: '', message: expect.stringMatching(/^f\.yaml: cannot read the spec: .*alias/i) }]);
  });
});
