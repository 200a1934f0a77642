/**
 * Every `npm run bench:*` answers `--help` with its usage and runs nothing. A bench that ignored it
 * ran in full instead (bench:fleet started a fleet of 1,000 agents; bench:fleet-register 10,000)
 * and rewrote its results file under bench/results/.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const REPO = join(import.meta.dirname, '..');
const scripts: Record<string, string> = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')).scripts;
/** The bench files the npm scripts run. */
const benches = Object.entries(scripts)
  .filter(([name]) => name.startsWith('bench:'))
  .map(([name, command]) => ({ name, file: /bench\/[\w-]+\.ts/.exec(command)?.[0] }))
  .filter((b): b is { name: string; file: string } => b.file !== undefined);

function help(file: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file, '--help'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    // A bench that ignores --help is running: stop it well before it writes anything.
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe.concurrent('the benches answer --help', () => {
  it('finds the benches the npm scripts run', () => {
    expect(benches.length).toBeGreaterThan(10);
  });

  it.each(benches)(
    '$name prints its usage and exits 0',
    async ({ file }) => {
      const head = readFileSync(join(REPO, file), 'utf8');
      // The usage is the file's header comment: its first line, as printed.
      const first = /^\/\*\*\n \* (.+)$/m.exec(head)?.[1];
      expect(first, `${file} starts with a /** header`).toBeDefined();
      const r = await help(file);
      expect(r.code, r.out).toBe(0);
      expect(r.out.split('\n')[0]).toBe(first);
    },
    30_000,
  );
});
