import { readdirSync } from 'node:fs';

/**
 * Every process id /proc lists now, or null where /proc cannot be read (not Linux, or hidden):
 * each caller decides what "cannot tell" means for it (a uid counted as used, no process found).
 * A process may be gone by the time its files are read: readers of /proc/<pid>/… expect that.
 */
export function procPids(): string[] | null {
  try {
    return readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return null;
  }
}
