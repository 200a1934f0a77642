import { describe, expect, it } from 'vitest';
import { jsonTextBounds } from './json-text-bounds.js';
import { SPEC_BOUNDS } from './spec-limits.js';

const scan = (text: string, b: Partial<typeof SPEC_BOUNDS> = {}) => jsonTextBounds(text, { ...SPEC_BOUNDS, ...b }, 'body');

describe('jsonTextBounds', () => {
  it('passes a spec, counting every value, keys included', () => {
    const spec = JSON.stringify({ name: 'j', stages: [{ name: 'a', command: ['echo', '[[[[{{{{"\\"]]'], resources: { gpu: 1.5, cpu: -2 } }], x: [true, null] });
    expect(scan(spec)).toBeUndefined();
    // {} name "j" stages [] {} name "a" command [] "echo" "…" resources {} gpu 1.5 cpu -2 x [] true null
    expect(scan(spec, { maxNodes: 22 })).toBeUndefined();
    expect(scan(spec, { maxNodes: 21 })).toMatch(/^line 1, column \d+: the body has more than 21 values/);
    expect(scan(spec, { maxDepth: 4 })).toBeUndefined();
    expect(scan(spec, { maxDepth: 3 })).toMatch(/nests deeper than 3 levels/);
  });

  it('refuses deep nesting at the bracket that passes the bound, with its line', () => {
    expect(scan(`{\n  "jobs": ${'['.repeat(1 << 20)}${']'.repeat(1 << 20)}}`)).toBe(
      'line 2, column 42: the body nests deeper than 32 levels (lists and mappings inside each other; a job spec needs about 6)',
    );
  });

  it('refuses a flat body of too many values', () => {
    expect(scan(`[${'1,'.repeat(100_000)}1]`)).toMatch(/^line 1, column 200000: the body has more than 100000 values/);
  });
});
