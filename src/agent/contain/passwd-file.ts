/**
 * The host's users and groups as /etc/passwd and /etc/group list them: who `--run-as` names, and
 * which uids and gids of `--uid-range` belong to someone already (attempt-users.ts). Read directly
 * rather than through NSS: the agent must not hand out a uid a local account has, and the range is
 * chosen (systemd's DynamicUser range) so that directory services do not use it either.
 */
import { readFileSync, statSync } from 'node:fs';

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
}

export const PASSWD_FILE = '/etc/passwd';
export const GROUP_FILE = '/etc/group';

/** The entries of a passwd file; a missing file lists nobody. Malformed lines are skipped, as libc's own reader does. */
export function readPasswd(file: string): PasswdEntry[] {
  const out: PasswdEntry[] = [];
  for (const fields of lines(file)) {
    const [name, , uid, gid] = fields;
    if (!name || !isId(uid) || !isId(gid)) continue;
    out.push({ name, uid: Number(uid), gid: Number(gid) });
  }
  return out;
}

/** The gids a group file lists. */
export function readGroupIds(file: string): Set<number> {
  const out = new Set<number>();
  for (const [name, , gid] of lines(file)) if (name && isId(gid)) out.add(Number(gid));
  return out;
}

/** The file's modification time and size, to read it again only when it changed (null: absent). */
export function fileMark(file: string): string | null {
  const st = statSync(file, { throwIfNoEntry: false });
  return st ? `${st.mtimeMs}:${st.size}:${st.ino}` : null;
}

function lines(file: string): string[][] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  return text
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => l.split(':'));
}

function isId(text: string | undefined): text is string {
  return text !== undefined && /^\d{1,10}$/.test(text) && Number(text) <= 2 ** 32 - 2;
}
