import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import SQLite from 'better-sqlite3';

/**
 * One control plane per SQLite data directory: a second `gantry up` on the same directory would
 * run a second scheduler and a second set of same-named agents against one database.
 *
 * The lock is SQLite's own: an exclusive transaction on `server.lock`, opened at start and never
 * ended, so it is an operating-system file lock held for exactly the life of the process. The
 * kernel releases it when the process dies, however it dies (SIGKILL included), as it closes the
 * process's files: a supervisor restarting the server at once finds it free, without waiting for
 * the old process to be reaped. A holder still being torn down gets `waitMs` to let go.
 * `server.pid` only says who holds it, for the message.
 */
export function lockDataDir(dataDir: string, opts: { waitMs?: number } = {}): () => void {
  const lockFile = join(dataDir, 'server.lock');
  const pidFile = join(dataDir, 'server.pid');
  const db = new SQLite(lockFile);
  try {
    db.pragma(`busy_timeout = ${Math.max(0, Math.floor(opts.waitMs ?? 5000))}`);
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === 'SQLITE_BUSY') {
      let holder = '';
      try {
        holder = readFileSync(pidFile, 'utf8').trim();
      } catch {
        // not written yet: the holder is starting
      }
      throw new Error(`data directory ${dataDir} is in use by process ${holder || '(starting)'} (another Gantry); stop it or use another --data-dir`);
    }
    throw err;
  }
  writeFileSync(pidFile, String(process.pid));
  return () => {
    try {
      if (readFileSync(pidFile, 'utf8').trim() === String(process.pid)) rmSync(pidFile);
    } catch {
      // already gone
    }
    try {
      db.exec('ROLLBACK');
    } catch {
      // nothing to end
    }
    db.close();
  };
}
