import { readFileSync } from 'node:fs';

let cached: string | undefined;

/**
 * The package version, reported when registering so the server can tell agents apart in a rolling
 * upgrade. Read at run time because package.json sits outside the compiled tree (../../ from both
 * src/agent and dist/agent).
 */
export function agentVersion(): string {
  if (cached === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
      cached = typeof pkg.version === 'string' ? pkg.version : 'unknown';
    } catch {
      cached = 'unknown';
    }
  }
  return cached;
}
