/**
 * The server's data directory made private at its start, before the database is opened (docs/
 * containment.md, "Private files"): what an earlier version made under umask 022 (gantry.db, its
 * -wal and -shm, the tokens, the server log, the artifacts: 0644 in 0755 directories) gets the
 * modes of lib/private-mode.ts, so that an upgrade closes what the umask alone (PRIVATE_UMASK, for
 * what is made from now on) would leave open. SQLite gives a new -wal or -shm the mode of the
 * database file, so the database is tightened before it is opened.
 *
 * Under `gantry up` the data directory holds the local agents' (agents/<machine>/): it and agents/
 * are passages (0711), and every agent directory there is tightened as its agent would, those of
 * machines no longer in the cluster file included.
 *
 * Only what the server made is touched: its files by name, the artifacts' directory whole (walked
 * only when an earlier version left it open: a tightened root keeps what is below it private, and
 * the walk is as long as the store).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { makeAgentFilesPrivate } from '../agent/disk/agent-private-files.js';
import { ModeTightener } from '../agent/disk/mode-tightener.js';
import { privateMode } from '../lib/private-mode.js';
import { adminTokenFile, joinTokenFile } from './token-file.js';
import { artifactsDir, databaseFile, type ServerConfig } from './server-config.js';

/** SQLite's companions of a database file (write-ahead log, its index, a rollback journal). */
const SQLITE_SUFFIXES = ['', '-wal', '-shm', '-journal'];
/** token-file.ts's temporary files, which a crash between write and rename can leave. */
const TOKEN_TMP = /^(admin|join)\.token\.\d+\.tmp$/;

/** `holdsAgents`: `gantry up`, whose local agents keep their directories under agents/. */
export function makeServerFilesPrivate(config: ServerConfig, opts: { holdsAgents: boolean }): ModeTightener {
  const t = new ModeTightener();
  const dataDir = config.dataDir;
  if (t.set(dataDir, privateMode(opts.holdsAgents ? 'up-data-dir' : 'server-data-dir'), { follow: true })?.kind !== 'dir') return t;
  const db = databaseFile(config);
  // The lock (data-dir-lock.ts) is a SQLite database too.
  const files = [...SQLITE_SUFFIXES.map((s) => db + s), ...SQLITE_SUFFIXES.map((s) => join(dataDir, 'server.lock') + s)];
  files.push(join(dataDir, 'server.pid'), adminTokenFile(dataDir), joinTokenFile(dataDir), join(dataDir, 'server.log'));
  for (const e of t.entries(dataDir)) if (TOKEN_TMP.test(e.name)) files.push(join(dataDir, e.name));
  for (const f of files) t.set(f, privateMode('file'));
  const artifacts = artifactsDir(config);
  const found = t.set(artifacts, privateMode('dir'), { follow: true });
  if (found?.kind === 'dir' && found.before & 0o077) t.tree(artifacts, privateMode('dir'), privateMode('file'));
  if (opts.holdsAgents) {
    const agents = join(dataDir, 'agents');
    // Made here with its mode: an agent making it (mkdir -p of its own directory) would leave it 0700.
    mkdirSync(agents, { recursive: true });
    if (t.set(agents, privateMode('up-agents-dir'))?.kind === 'dir') {
      for (const e of t.entries(agents)) if (e.isDirectory()) makeAgentFilesPrivate(join(agents, e.name), join(agents, e.name, 'checkpoints'), t);
    }
  }
  return t;
}
