/**
 * Whether a user (not root: an attempt's uid) may execute a file: every directory on the way may be
 * searched by it and the file executed, by the owner's, the group's or the others' bits as the
 * kernel picks them (the user has no supplementary groups: launch-containment.ts). The agent runs as
 * root, for whom `access(X_OK)` passes on nearly anything; a command found that way in a PATH
 * entry the attempt's user cannot enter (root's `~/.pyenv/shims` in /root, 0700) would fail to exec
 * where the user's own `execvp` goes on to the next entry (/usr/bin/python3). Links are followed, as
 * exec follows them.
 */
import { realpathSync, statSync, type Stats } from 'node:fs';
import { dirname } from 'node:path';

export interface UnixUser {
  readonly uid: number;
  readonly gid: number;
}

/** The bits of `mode` that apply to `user` for `st` (owner, group, others), as a 0..7 number. */
function bitsFor(st: Stats, user: UnixUser): number {
  if (st.uid === user.uid) return (st.mode >> 6) & 7;
  if (st.gid === user.gid) return (st.mode >> 3) & 7;
  return st.mode & 7;
}

export function executableBy(path: string, user: UnixUser): boolean {
  let real: string;
  let st: Stats;
  try {
    real = realpathSync(path);
    st = statSync(real);
  } catch {
    return false;
  }
  if (!st.isFile() || (bitsFor(st, user) & 1) === 0) return false;
  for (let dir = dirname(real); ; dir = dirname(dir)) {
    try {
      if ((bitsFor(statSync(dir), user) & 1) === 0) return false;
    } catch {
      return false;
    }
    if (dir === '/') return true;
  }
}
