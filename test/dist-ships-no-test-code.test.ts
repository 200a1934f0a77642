import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from './support/gantry-process.js';

/**
 * What `npm run build` writes into dist/ is what the package ships (package.json `files`): no
 * test, conformance suite or test support may be in it, and nothing there may import a test
 * framework, which is a dev dependency an installed Gantry does not have. `npm test` builds first.
 */
const DIST = join(REPO, 'dist');

/** Packages only tests use (devDependencies): an import of one from dist/ fails once installed. */
const TEST_PACKAGES = /^(?:vitest|@vitest\/.*|fast-check|@fast-check\/.*|playwright-core)$/;

const IMPORTS = [
  /\b(?:import|export)\s[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/g,
  /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
  /^\s*import\s+['"]([^'"]+)['"]/gm,
  /\brequire\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

describe('the build (dist/)', () => {
  it('exists (npm test builds it first; after editing src/, run npm run build)', () => {
    expect(existsSync(join(DIST, 'cli', 'main.js'))).toBe(true);
  });

  it('holds no test files or conformance suites', () => {
    const wrong = files(DIST)
      .map((p) => relative(DIST, p))
      .filter((p) => /\.test\.js$|conformance/.test(p));
    expect(wrong).toEqual([]);
  });

  it('imports no test framework or test support from any file', () => {
    const wrong = files(DIST)
      .filter((p) => p.endsWith('.js'))
      .flatMap((p) => {
        const text = readFileSync(p, 'utf8');
        const specs = IMPORTS.flatMap((re) => [...text.matchAll(re)].map((m) => m[1]!));
        return specs.filter((s) => TEST_PACKAGES.test(s) || /(?:^|\/)test\/support\//.test(s)).map((s) => `${relative(DIST, p)} -> ${s}`);
      });
    expect(wrong).toEqual([]);
  });
});
