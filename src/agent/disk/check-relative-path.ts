/**
 * Paths that come from the server (input file names, stage names) end up joined to directories on
 * this machine. Anything that could point outside that directory is refused, not cleaned up: a
 * path like that is a bug or an attack, and silently rewriting it would hide either.
 */
export class UnsafePathError extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`refusing path "${path}": ${why}`);
    this.name = 'UnsafePathError';
  }
}

/** The '/'-separated segments of a relative path that stays inside its base directory. */
export function checkRelativePath(path: string): string[] {
  if (path === '') throw new UnsafePathError(path, 'it is empty');
  if (path.includes('\0')) throw new UnsafePathError(path, 'it contains a NUL byte');
  if (path.includes('\\')) throw new UnsafePathError(path, 'it contains a backslash');
  if (path.startsWith('/') || /^[A-Za-z]:/.test(path)) throw new UnsafePathError(path, 'it is absolute');
  const segments = path.split('/');
  for (const s of segments) {
    if (s === '..') throw new UnsafePathError(path, 'it contains ".."');
    if (s === '' || s === '.') throw new UnsafePathError(path, 'it has an empty or "." segment');
  }
  return segments;
}

/** A single directory name, e.g. a stage name used as input/<stage>/. */
export function checkPathSegment(name: string): string {
  const segments = checkRelativePath(name);
  if (segments.length !== 1) throw new UnsafePathError(name, 'it must be a single name, without "/"');
  return name;
}
