/**
 * A command's argv, contained (launch-containment.ts), for the ways of starting it that cannot do it
 * themselves in the forked child: the bash launcher and the agent's own spawn. A `/bin/sh` joins the
 * cgroups (its `echo 0` moves the writer, the shell itself, which then `exec`s and keeps its pid),
 * sets the umask, and `exec`s `setpriv` (util-linux) to drop to the user with no supplementary groups
 * and no new privileges, which `exec`s the sandbox's wrap, then the command. The Python launcher does
 * the same in its forked child without the two extra execs (launcher.py, `confine`).
 */
import { existsSync } from 'node:fs';
import type { LaunchContainment } from './launch-containment.js';

const JOIN = [
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do',
  '  echo 0 > "$1" || { echo "gantry: cannot join the cgroup $1" >&2; exit 126; }',
  '  shift',
  'done',
  'shift',
  'umask 022',
  'exec "$@"',
].join('\n');

/** Where setpriv is; a command to be run as another user without it cannot be started (spawn-failed, saying so). */
export const SETPRIV = '/usr/bin/setpriv';

export function containedArgv(argv: readonly string[], contain: LaunchContainment | undefined): string[] {
  if (!contain || (contain.procsFiles.length === 0 && contain.user === null && contain.wrap.length === 0)) return [...argv];
  if (contain.user && !existsSync(SETPRIV)) throw new Error(`${SETPRIV} (util-linux) is needed to run the command as uid ${contain.user.uid} without python3`);
  const user = contain.user ? [SETPRIV, `--reuid=${contain.user.uid}`, `--regid=${contain.user.gid}`, '--clear-groups', '--no-new-privs', '--'] : [];
  return ['/bin/sh', '-c', JOIN, 'gantry-join', ...contain.procsFiles, '--', ...user, ...contain.wrap, ...argv];
}
