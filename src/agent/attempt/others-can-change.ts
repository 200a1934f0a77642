import { lstatSync, realpathSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { errorText } from '../../lib/error-text.js';

/**
 * Why a user other than this process's (and root) could put another file at `path`, or null where
 * none could: every component from / down, as the kernel walks it, owned by root or by this
 * process's user and not writable by group or others (a sticky directory excepted, as /tmp:
 * others cannot rename or remove what is ours there); a symbolic link owned so, and its target
 * checked the same way. Components not made yet end the walk: whoever makes them is us. OpenSSH's
 * StrictModes asks the same of a user's key files before it trusts them.
 *
 * Why: the agent (root, where it contains its stages) executes the C launcher it built into its
 * data directory (host-launcher.ts), and that directory is `./.gantry-agent-<name>` by default,
 * under whatever directory the agent was started in. Where a user could rename a component of that
 * path, they could plant a binary of the right name (its hash is the public source's) for root to
 * run: such a path is not used for a binary. With every component checked, nobody else can swap
 * one between this check and the binary's later starts.
 */
export function othersCanChange(path: string, uid = process.geteuid?.() ?? 0, depth = 0): string | null {
  if (depth > 16) return `${path}: too many symbolic links`;
  const parts = resolve(path).split('/').filter(Boolean);
  let at = '/';
  for (let i = 0; i <= parts.length; i++) {
    if (i > 0) at = join(at, parts[i - 1]!);
    let st;
    try {
      st = lstatSync(at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      return `${at} cannot be examined (${errorText(err)})`;
    }
    if (st.uid !== 0 && st.uid !== uid) return `${at} belongs to uid ${st.uid}, not to root or to this agent's user (uid ${uid})`;
    if (st.isSymbolicLink()) {
      let target: string;
      try {
        target = realpathSync(at);
      } catch (err) {
        return `${at} is a symbolic link that does not resolve (${errorText(err)})`;
      }
      const why = othersCanChange(target, uid, depth + 1);
      if (why) return why;
      continue;
    }
    const sticky = st.isDirectory() && (st.mode & 0o1000) !== 0;
    if ((st.mode & 0o022) !== 0 && !sticky) return `${at} is writable by ${st.mode & 0o020 ? 'its group' : 'others'} (mode ${(st.mode & 0o7777).toString(8)})`;
  }
  return null;
}
