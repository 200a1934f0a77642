/**
 * Reading and writing the files of a cgroup hierarchy (cgroupfs: memory, not disk, so synchronous
 * calls cost microseconds). An error names the file and what was written, so that a refused limit
 * says which one (a cgroupfs write fails with EINVAL, EBUSY or EACCES and nothing else).
 */
import { closeSync, openSync, readSync, writeFileSync } from 'node:fs';
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

/**
 * A cgroup file's text; null when it does not exist (an older kernel, a cgroup already removed).
 * Read into a buffer kept for it, without the fstat readFileSync makes first (cgroupfs says size 0
 * anyway): one call fewer on every read of an attempt's end.
 */
export function readCgroupFile(file: string): string | null {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new CgroupFileError(file, (err as NodeJS.ErrnoException).code, `cannot read ${file}: ${errorText(err)}`);
  }
  try {
    let len = 0;
    for (;;) {
      if (len === buffer.length) buffer = Buffer.concat([buffer, Buffer.alloc(buffer.length)]);
      const n = readSync(fd, buffer, len, buffer.length - len, null);
      if (n === 0) return buffer.toString('utf8', 0, len);
      len += n;
    }
  } catch (err) {
    throw new CgroupFileError(file, (err as NodeJS.ErrnoException).code, `cannot read ${file}: ${errorText(err)}`);
  } finally {
    closeSync(fd);
  }
}

/** Reused by every read (synchronous: nothing else uses it meanwhile); grown for a long `cgroup.procs`. */
let buffer = Buffer.alloc(16 * 1024);

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
