/**
 * Compiles the C launcher (src/agent/attempt/launcher.c, docs/agent.md "The C launcher") into a
 * binary for this machine, where a C compiler is: `npm run build` puts it at
 * dist/agent/attempt/gantry-launcher, beside launcher.py and launcher.c, and the tests' setup
 * (test/support/c-launcher-build.ts) at src/agent/attempt/gantry-launcher (gitignored), where the
 * agent run from its sources looks. Either is this checkout's: the package ships launcher.c and not
 * the binary (package.json `files`), and an agent installed from it builds its own at its start
 * (src/agent/attempt/host-launcher.ts). With no compiler it says so in one line; a compiler that
 * rejects the source fails the build (warnings are errors here: this is the source's check).
 *
 *     node --import tsx scripts/build-launcher.ts OUT
 */
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { compileLauncher, launcherSourceHash, launcherVersion } from '../src/agent/attempt/compile-launcher.js';
import { LAUNCHER_SOURCE } from '../src/agent/attempt/host-launcher.js';
import { readFileSync } from 'node:fs';

const FLAGS = ['-O2', '-Wall', '-Wextra', '-Werror'];

/** Builds `out` unless it already runs here and was built from this source; 'no-compiler' where $CC (default cc) is not to be had. */
export function buildLauncher(out: string, cc = process.env.CC || 'cc'): 'built' | 'fresh' | 'no-compiler' {
  const v = launcherVersion(out);
  if (v.kind === 'runs' && v.source === launcherSourceHash(readFileSync(LAUNCHER_SOURCE))) return 'fresh';
  // A `cc` that is there and does not work (a stub that asks for tools to be installed) is no
  // compiler either: `npm ci` goes on, and agents start their stages with launcher.py.
  const probe = spawnSync(cc, ['--version'], { stdio: 'ignore' });
  if (probe.error || probe.status !== 0) return 'no-compiler';
  const r = compileLauncher({ source: LAUNCHER_SOURCE, out, cc, flags: FLAGS });
  switch (r.kind) {
    case 'built':
      return 'built';
    case 'no-compiler':
      return 'no-compiler';
    case 'failed':
      throw new Error(`${cc} ${FLAGS.join(' ')} could not compile ${LAUNCHER_SOURCE}:\n${r.stderr}`);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const out = process.argv[2];
  if (!out) throw new Error('usage: node --import tsx scripts/build-launcher.ts OUT');
  if (buildLauncher(out) === 'no-compiler')
    console.log(
      `no C compiler (${process.env.CC || 'cc'}): the C launcher is not built here; an agent builds its own at its start where a compiler is, else starts commands with launcher.py`,
    );
}
