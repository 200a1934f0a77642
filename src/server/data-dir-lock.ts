import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * One control plane per SQLite data directory: a second `gantry up` on the same directory would
 * run a second scheduler and a second set of same-named agents against one database. The lock
 * is a pid file; one left by a process that died (SIGKILL) is taken over.
 */
export function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, 'server.pid');
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' });
  } catch {
    const holder = Number(readFileSync(file, 'utf8').trim());
    if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && alive(holder)) {
      throw new Error(`data directory ${dataDir} is in use by process ${holder} (another Gantry); stop it or use another --data-dir`);
    }
    writeFileSync(file, String(process.pid));
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
