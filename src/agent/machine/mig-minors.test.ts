import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { migCapabilityMinors, parseMigMinors } from './mig-minors.js';

// Written from the documented format, not captured (the fixture's header says from where); the header lines go.
const fixtures = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../test/fixtures/gpu');
const table = readFileSync(path.join(fixtures, 'mig-minors.txt'), 'utf8')
  .split('\n')
  .filter((l) => !l.startsWith('#'))
  .join('\n');

describe('parseMigMinors', () => {
  it('reads every capability with its minor', () => {
    const minors = parseMigMinors(table);
    expect(minors.get('config')).toBe(1);
    expect(minors.get('monitor')).toBe(2);
    expect(minors.get('gpu0/gi1/access')).toBe(12);
    expect(minors.get('gpu0/gi1/ci0/access')).toBe(13);
    expect(minors.get('gpu1/gi14/ci7/access')).toBe(3 + 135 + 9 * 14 + 8);
    expect(minors.size).toBe(2 + 2 * 15 * 9);
  });

  it('skips blank lines and takes CRLF and tabs', () => {
    expect([...parseMigMinors('config 1\r\n\r\ngpu0/gi0/access\t3\n')]).toEqual([
      ['config', 1],
      ['gpu0/gi0/access', 3],
    ]);
  });

  it('names the line it cannot read', () => {
    expect(() => parseMigMinors('config 1\ngpu0/gi1/access twelve\n')).toThrow(/mig-minors line 2: .*gpu0\/gi1\/access twelve/);
    expect(() => parseMigMinors('gpu0/gi1/access\n')).toThrow(/line 1/);
  });
});

describe('migCapabilityMinors', () => {
  const minors = parseMigMinors(table);

  it("gives a MIG device's GPU instance and compute instance access minors, by the GPU's minor", () => {
    expect(migCapabilityMinors(minors, 0, 1, 0)).toEqual([12, 13]);
    expect(migCapabilityMinors(minors, 0, 2, 1)).toEqual([21, 23]);
    expect(migCapabilityMinors(minors, 1, 0, 0)).toEqual([138, 139]);
  });

  it('gives null where the table lacks either file', () => {
    expect(migCapabilityMinors(minors, 7, 1, 0)).toBeNull();
    expect(migCapabilityMinors(new Map([['gpu0/gi1/access', 12]]), 0, 1, 0)).toBeNull();
  });
});
