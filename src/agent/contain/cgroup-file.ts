/**
 * Reading and writing the files of a cgroup hierarchy (cgroupfs: memory, not disk, so synchronous
 * calls cost microseconds). An error names the file and what was written, so that a refused limit
 * says which one (a cgroupfs write fails with EINVAL, EBUSY or EACCES and nothing else).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { errorText } from '../../lib/error-text.js';

export class CgroupFileError extends Error {
  constructor(
    readonly file: string,
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'CgroupFileError';
  }
}

/**
 * Writes `value` into a cgroup file. `append`: opened O_APPEND, for files that take one rule per
 * write (`devices.allow`): cgroupfs ignores the offset, and a fake tree in a test keeps every rule.
 */
export function writeCgroupFile(file: string, value: string, opts: { append?: boolean } = {}): void {
  try {
    writeFileSync(file, value, { flag: opts.append ? 'a' : 'w' });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new CgroupFileError(file, code, `cannot write "${value.trim()}" to ${file}: ${errorText(err)}`);
  }
}

/** A cgroup file's text; null when it does not exist (an older kernel, a cgroup already removed). */
export function readCgroupFile(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new CgroupFileError(file, (err as NodeJS.ErrnoException).code, `cannot read ${file}: ${errorText(err)}`);
  }
}

/** One value of a flat-keyed file (`memory.events`, `cpu.stat`, `memory.oom_control`: "key value" lines); null when absent. */
export function readKeyedValue(file: string, key: string): number | null {
  const text = readCgroupFile(file);
  if (text === null) return null;
  for (const line of text.split('\n')) {
    const space = line.indexOf(' ');
    if (space > 0 && line.slice(0, space) === key) {
      const n = Number(line.slice(space + 1).trim());
      return Number.isFinite(n) ? n : null;
    }
  }
  return null;
}

/** A file holding one number (`memory.peak`, `cpuacct.usage`); null when absent or not a number (`max`). */
export function readNumber(file: string): number | null {
  const text = readCgroupFile(file)?.trim();
  if (text === undefined || !/^\d+$/.test(text)) return null;
  return Number(text);
}

/** The pids listed in a `cgroup.procs`; none when the cgroup is gone. */
export function readPids(procsFile: string): number[] {
  const text = readCgroupFile(procsFile);
  if (text === null) return [];
  const pids: number[] = [];
  for (const line of text.split('\n')) if (line !== '') pids.push(Number(line));
  return pids;
}
