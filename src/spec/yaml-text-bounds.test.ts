import { readdirSync, readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { describe, expect, it } from 'vitest';
import { BATCH_BOUNDS, SPEC_BOUNDS, type SpecBounds } from './spec-limits.js';
import { yamlTextBounds } from './yaml-text-bounds.js';

const bounds = (b: Partial<SpecBounds>): SpecBounds => ({ ...SPEC_BOUNDS, ...b });
const scan = (text: string, b: Partial<SpecBounds> = {}) => yamlTextBounds(text, bounds(b), 'spec');

/** The smallest bound of this kind the text passes: what the scan counted. */
function counted(text: string, kind: 'maxDepth' | 'maxNodes'): number {
  let lo = 0;
  let hi = 10_000_000;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    if (scan(text, { [kind]: mid })) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

describe('yamlTextBounds', () => {
  it('passes every example job file, and counts about what the parser builds, never much less', () => {
    const dir = new URL('../../examples/', import.meta.url);
    const files = readdirSync(dir).filter((f) => /\.ya?ml$/.test(f));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const text = readFileSync(new URL(f, dir), 'utf8');
      expect(yamlTextBounds(text, BATCH_BOUNDS, 'file'), f).toBeUndefined();
      let nodes = 0;
      JSON.stringify(parseDocument(text).toJS(), (_k, v: unknown) => (nodes++, v));
      expect(counted(text, 'maxNodes'), f).toBeGreaterThanOrEqual(Math.floor(nodes / 2));
      expect(counted(text, 'maxDepth'), f).toBeLessThanOrEqual(8);
    }
  });

  it('counts depth over flow brackets, block indentation and compact lists, naming the line and column', () => {
    expect(counted('a: [[[1]]]\n', 'maxDepth')).toBe(4);
    expect(counted('a:\n  b:\n    c: 1\n', 'maxDepth')).toBe(3);
    expect(counted('- - - x\n', 'maxDepth')).toBe(3);
    expect(counted('a:\n  - { b: [1, 2] }\n', 'maxDepth')).toBe(4);
    expect(scan(`name: j\nstages: ${'['.repeat(40)}`)).toBe(
      'line 2, column 40: the spec nests deeper than 32 levels (lists and mappings inside each other; a job spec needs about 6)',
    );
    expect(scan('- '.repeat(33))).toMatch(/^line 1, column 65: the spec nests deeper than 32/);
    expect(scan(Array.from({ length: 40 }, (_, i) => `${' '.repeat(i)}k${i}:`).join('\n'))).toMatch(/^line 33, column 33: .*deeper than 32/);
  });

  it('does not count brackets that are text: in quotes, plain scalars, block scalars and comments', () => {
    const text = [
      'name: "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["',
      "note: '{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{ it''s'",
      'cmd: echo a[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[',
      "plain: it's [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
      '# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[',
      'script: |',
      '  if [[ -f x ]]; then [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[',
      '      - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -',
      'after: [1, "]", 2]',
    ].join('\n');
    expect(scan(text)).toBeUndefined();
    expect(counted(text, 'maxDepth')).toBe(2);
  });

  it('a stray quote or a short block scalar does not hide the structure after it', () => {
    // The parser reads line 2 as more of line 1's plain scalar and line 3 as a new key: its brackets are structure.
    expect(scan(`a: x\n 'y\nb: ${'['.repeat(40)} '`)).toMatch(/^line 3, column 35: .*deeper than 32/);
    // A block scalar ends at the first line indented less than its first one.
    expect(scan(`a: |\n      x\n   ${'['.repeat(40)}`)).toMatch(/deeper than 32/);
    expect(scan(`a: >2\n   x\n ${'['.repeat(40)}`)).toMatch(/deeper than 32/);
  });

  it('counts values (scalars, keys, lists, mappings) in flow and block style, JSON included', () => {
    expect(counted('[1, 2, 3]', 'maxNodes')).toBe(4);
    expect(counted('{"a":1,"b":[true,null]}', 'maxNodes')).toBe(7);
    expect(counted('a: 1\nb:\n  - x\n  - y\n', 'maxNodes')).toBe(7);
    expect(scan(`jobs: [${'1,'.repeat(200_000)}]`)).toBe(
      'line 1, column 200004: the spec has more than 100000 values (scalars, keys, lists and mappings); split it into several',
    );
  });

  it('counts anchors and aliases: a billion laughs is refused before anything expands', () => {
    const laughs = [
      'a: &a [x, x, x, x, x, x, x, x, x, x]',
      ...Array.from(
        { length: 12 },
        (_, i) =>
          `l${i}: &l${i} [${Array(10)
            .fill(i ? `*l${i - 1}` : '*a')
            .join(', ')}]`,
      ),
    ];
    expect(scan(laughs.join('\n'))).toMatch(/^line 12, column \d+: the spec has more than 100 YAML aliases \(\*name\)$/);
    expect(scan(Array.from({ length: 101 }, (_, i) => `k${i}: &a${i} x`).join('\n'))).toMatch(/^line 101, column 7: .*more than 100 YAML anchors/);
    expect(scan('a: &x 1\nb: *x\nc: [*x, *x]\n')).toBeUndefined();
  });

  it('a 4 MiB attack is refused at the bracket that passes the bound (the scan itself stays linear: it does not stop early without the bound)', () => {
    const attack = 'jobs: ' + '['.repeat(4 << 20);
    expect(scan(attack, { maxDepth: 10_000_000, maxNodes: 10_000_000 })).toBeUndefined();
    expect(scan(attack)).toMatch(/deeper than 32/);
  });
});
