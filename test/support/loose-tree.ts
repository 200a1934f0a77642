import { chmodSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Lays out `dirs` and `files` below `root` as a version before private files left them, under
 * umask 022: directories 0755, files 0644 (`''` in `dirs` is `root` itself).
 */
export function looseTree(root: string, dirs: string[], files: string[]): void {
  for (const d of dirs) {
    mkdirSync(join(root, d), { recursive: true });
    chmodSync(join(root, d), 0o755);
  }
  for (const f of files) {
    writeFileSync(join(root, f), 'x');
    chmodSync(join(root, f), 0o644);
  }
}

/** The modes of `paths` below `root` in octal text, to compare with an expected table as one object. */
export function modesOf(root: string, paths: string[]): Record<string, string> {
  return Object.fromEntries(paths.map((p) => [p, (statSync(join(root, p)).mode & 0o7777).toString(8)]));
}

/** An expected table of modes in the same octal text. */
export function octalModes(modes: Record<string, number>): Record<string, string> {
  return Object.fromEntries(Object.entries(modes).map(([p, m]) => [p, m.toString(8)]));
}
