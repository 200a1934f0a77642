import { LAUNCHER_C } from '../../src/agent/attempt/launcher-programs.js';
import { buildLauncher } from '../../scripts/build-launcher.js';

/**
 * Vitest's global setup: the C launcher compiled beside its source (gitignored), where the agent
 * run from src/ finds it, so that the tests start commands as a built agent does: with the C
 * launcher first (launcher-programs.ts). Rebuilt only when the binary there does not answer this
 * launcher.c's hash (compile-launcher.ts); with no compiler, the tests run with Python and bash,
 * and say so.
 */
export default function setup(): void {
  if (buildLauncher(LAUNCHER_C) === 'no-compiler') console.warn('no C compiler: the C launcher is not tested in this run');
}
