/**
 * Compiles the C launcher (launcher.c, docs/agent.md "The C launcher") into a binary, and asks a
 * binary which source it was built from. Shared by the two places that build it: `npm run build`
 * and the tests' setup (scripts/build-launcher.ts, warnings as errors: a check of the source), and
 * the agent at its start on a host where no binary built for it is at hand (host-launcher.ts).
 *
 * The binary carries the hash of its source (`-DGANTRY_LAUNCHER_SOURCE`) and answers it to
 * `--version`: that answer is what tells a binary built from this source on a host like this one
 * from a stale one (older source) or a foreign one (another architecture or libc: it does not
 * start, or starts and answers something else), which a file's presence or its mtime cannot.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { errorText } from '../../lib/error-text.js';

/** The hash a binary built from `source` (the text of launcher.c) answers to `--version`. */
export function launcherSourceHash(source: string | Buffer): string {
  return createHash('sha256').update(source).digest('hex').slice(0, 16);
}

export type CompileResult =
  | { kind: 'built' }
  /** `cc` could not be run at all (not installed, not executable). */
  | { kind: 'no-compiler'; why: string }
  /** It ran and refused: `firstError` is its first line that says error (else its first line). */
  | { kind: 'failed'; firstError: string; stderr: string };

/**
 * Compiles `source` into `out`, written beside it and renamed, so that an agent starting meanwhile
 * finds the old binary or the new one, never half of one.
 */
export function compileLauncher(o: { source: string; out: string; cc: string; flags: readonly string[] }): CompileResult {
  const hash = launcherSourceHash(readFileSync(o.source));
  const tmp = join(dirname(o.out), `.${basename(o.out)}.${process.pid}.tmp`);
  const r = spawnSync(o.cc, [...o.flags, `-DGANTRY_LAUNCHER_SOURCE="${hash}"`, '-o', tmp, o.source], { encoding: 'utf8' });
  if (r.error) {
    rmSync(tmp, { force: true });
    return { kind: 'no-compiler', why: `${o.cc}: ${errorText(r.error)}` };
  }
  if (r.status !== 0) {
    rmSync(tmp, { force: true });
    const lines = r.stderr.split('\n').filter((l) => l.trim() !== '');
    const firstError = lines.find((l) => /\berror\b/i.test(l)) ?? lines[0] ?? `${o.cc} exited with ${r.status ?? r.signal}`;
    return { kind: 'failed', firstError: firstError.trim(), stderr: r.stderr };
  }
  renameSync(tmp, o.out);
  return { kind: 'built' };
}

export type LauncherVersion =
  /** It ran here and said which source it was built from. */
  | { kind: 'runs'; source: string }
  | { kind: 'missing' }
  /** It exists and cannot be used here: it did not start (exec format error, not executable), hung, failed, or answered no version (built before versions). */
  | { kind: 'unusable'; why: string };

/** Runs `file --version` (a few milliseconds): the handshake before a binary is used. */
export function launcherVersion(file: string): LauncherVersion {
  const r = spawnSync(file, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 5000 });
  if (r.error) {
    if ((r.error as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'missing' };
    // EACCES: not executable; ETIMEDOUT: it hung.
    return { kind: 'unusable', why: `it does not start here (${errorText(r.error)})` };
  }
  if (r.status !== 0) {
    // A file the kernel will not execute (another architecture's ELF, no program at all) is run by
    // /bin/sh instead (execvp's ENOEXEC rule), which fails on it: its first line says which way.
    const said = r.stderr.split('\n').find((l) => l.trim() !== '');
    return {
      kind: 'unusable',
      why: `it ended with ${r.signal ?? `status ${r.status}`} when asked its version${said ? ` (${said.trim().slice(0, 200)})` : ''}`,
    };
  }
  const m = /^gantry-launcher (\S+)\n$/.exec(r.stdout);
  if (!m) return { kind: 'unusable', why: `it answers no version (${JSON.stringify(r.stdout.slice(0, 40))}): built from an older source` };
  return { kind: 'runs', source: m[1]! };
}
