import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../support/gantry-process.js';

/**
 * Routes read their request as their schema types it (src/api/api-app.ts: the TypeBox type
 * provider); a cast of `req.body`, `req.params` or `req.query` would silently drift from the schema
 * that validates it. A part a route reads without a schema gets one; a hook that sees every route
 * reads a param by name (auth/route-param.ts).
 */
const CAST = /\breq(?:uest)?\.(?:body|params|query)\b(?:\s*\?\?\s*\{\s*\})?\)?\s+as\s/;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return /\.tsx?$/.test(e.name) && !/\.test\.tsx?$/.test(e.name) ? [path] : [];
  });
}

describe('route typing', () => {
  it('no route casts its request: body, params and query are typed by their schemas', () => {
    const found = sources(join(REPO, 'src/api')).flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .flatMap((line, i) => (CAST.test(line) ? [`${relative(REPO, file)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(found).toEqual([]);
  });

  it('the pattern finds the casts it is meant to', () => {
    for (const line of [
      'const body = req.body as RegisterRequest;',
      'const v = (req.query as Record<string, unknown> | undefined)?.strict;',
      'const params = (req.params ?? {}) as Record<string, string>;',
    ]) {
      expect(CAST.test(line), line).toBe(true);
    }
    expect(CAST.test('const body = req.body;')).toBe(false);
  });
});
