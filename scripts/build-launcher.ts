/**
 * Compiles the C launcher (src/agent/attempt/launcher.c, docs/agent.md "The C launcher") into a
 * binary, where a C compiler is: `npm run build` puts it at dist/agent/attempt/gantry-launcher,
 * beside launcher.py, and the tests' setup (test/support/c-launcher-build.ts) at
 * src/agent/attempt/gantry-launcher (gitignored), where the agent run from its sources looks. With
 * no compiler it says so in one line and the agent starts commands with Python instead; a compiler
 * that rejects the source fails the build (warnings are errors).
 *
 *     node --import tsx scripts/build-launcher.ts OUT
 */
import { spawnSync } from 'node:child_process';
import { renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SOURCE = fileURLToPath(new URL('../src/agent/attempt/launcher.c', import.meta.url));
const FLAGS = ['-O2', '-Wall', '-Wextra', '-Werror'];

/** Builds `out` unless it is newer than the source already; 'no-compiler' where $CC (default cc) is not to be had. */
export function buildLauncher(out: string, cc = process.env.CC || 'cc'): 'built' | 'fresh' | 'no-compiler' {
  if (mtime(out) > Math.max(mtime(SOURCE), mtime(fileURLToPath(import.meta.url)))) return 'fresh';
  const probe = spawnSync(cc, ['--version'], { stdio: 'ignore' });
  if (probe.error || probe.status !== 0) return 'no-compiler';
  // Written beside it, then renamed: an agent starting meanwhile finds the old binary or the new one, never half of one.
  const tmp = join(dirname(out), `.gantry-launcher.${process.pid}`);
  const r = spawnSync(cc, [...FLAGS, '-o', tmp, SOURCE], { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    rmSync(tmp, { force: true });
    throw new Error(`${cc} ${FLAGS.join(' ')} could not compile ${SOURCE}:\n${r.stderr || r.error?.message}`);
  }
  renameSync(tmp, out);
  return 'built';
}

function mtime(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const out = process.argv[2];
  if (!out) throw new Error('usage: node --import tsx scripts/build-launcher.ts OUT');
  if (buildLauncher(out) === 'no-compiler')
    console.log(`no C compiler (${process.env.CC || 'cc'}): the C launcher is not built; the agent starts commands with launcher.py instead`);
}
