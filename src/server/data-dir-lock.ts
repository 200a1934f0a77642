import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * One control plane per SQLite data directory: a second `gantry up` on the same directory would
 * run a second scheduler and a second set of same-named agents against one database. The lock
 * is a pid file; one left by a process that died (SIGKILL) is taken over.
 */
export function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, 'server.pid');
  // Two tries: the second after removing a lock its holder left behind when it died. Creation
  // is exclusive both times, so of two servers starting together only one gets the lock.
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) {
        throw new Error(`cannot lock data directory ${dataDir}: another Gantry is starting or running there (${file})`);
      }
      const holder = Number(readFileSync(file, 'utf8').trim());
      // An empty file is a holder between create and write: alive, by definition.
      if (!Number.isInteger(holder) || holder <= 0 || alive(holder)) {
        throw new Error(`data directory ${dataDir} is in use by process ${holder || '(starting)'} (another Gantry); stop it or use another --data-dir`);
      }
      rmSync(file, { force: true });
    }
  }
  return () => {
    try {
      if (readFileSync(file, 'utf8').trim() === String(process.pid)) rmSync(file);
    } catch {
      // already gone
    }
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
