import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { makeDirectories, ModeTightener } from './mode-tightener.js';

const modeOf = (p: string) => statSync(p).mode & 0o7777;

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gantry-modes-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('ModeTightener', () => {
  it('gives a file and a directory their mode, and lists only what it changed', () => {
    const file = join(dir, 'f');
    writeFileSync(file, 'x');
    chmodSync(file, 0o644);
    const sub = join(dir, 'd');
    mkdirSync(sub, { mode: 0o700 });
    chmodSync(sub, 0o700);
    const t = new ModeTightener();
    expect(t.set(file, 0o600)).toEqual({ kind: 'file', before: 0o644 });
    expect(t.set(sub, 0o700)).toEqual({ kind: 'dir', before: 0o700 });
    expect(t.set(join(dir, 'absent'), 0o600)).toBeNull();
    expect(modeOf(file)).toBe(0o600);
    expect(t.changed).toEqual([file]);
    expect(t.problems).toEqual([]);
  });

  it('never follows a symbolic link (a link planted where a log was must not have root chmod what it names)', () => {
    const outside = join(dir, 'secret-elsewhere');
    writeFileSync(outside, 'x');
    chmodSync(outside, 0o644);
    const link = join(dir, 'stdout.log');
    symlinkSync(outside, link);
    const t = new ModeTightener();
    expect(t.set(link, 0o600)).toBeNull();
    expect(modeOf(outside)).toBe(0o644);
    expect(t.problems).toEqual([`${link} is a symbolic link: left as it is (Gantry keeps no links there; remove it, or make what it names private)`]);
  });

  it('follows a link where it is told to (a root the operator configured)', () => {
    const real = join(dir, 'real');
    mkdirSync(real);
    chmodSync(real, 0o755);
    const link = join(dir, 'data');
    symlinkSync(real, link);
    const t = new ModeTightener();
    expect(t.set(link, 0o711, { follow: true })?.kind).toBe('dir');
    expect(modeOf(real)).toBe(0o711);
  });

  it('opens no FIFO (it would block) and says it left it', () => {
    const fifo = join(dir, 'pipe');
    execFileSync('mkfifo', ['-m', '0644', fifo]);
    const t = new ModeTightener();
    expect(t.set(fifo, 0o600)).toBeNull();
    expect(modeOf(fifo)).toBe(0o644);
    expect(t.problems).toEqual([`${fifo} is neither a file nor a directory: left as it is`]);
  });

  it('leaves a shared directory (sticky bit, as /tmp) as it is', () => {
    const shared = join(dir, 'shared');
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    const t = new ModeTightener();
    expect(t.set(shared, 0o700, { follow: true })).toEqual({ kind: 'dir', before: 0o1777 });
    expect(modeOf(shared)).toBe(0o1777);
    expect(t.problems[0]).toMatch(/shared directory \(sticky bit, as \/tmp\): not made private/);
  });

  it('walks a tree: directories and files below the root, links passed over', () => {
    const root = join(dir, 'artifacts');
    mkdirSync(join(root, 'blobs', 'sha256', 'ab'), { recursive: true });
    writeFileSync(join(root, 'blobs', 'sha256', 'ab', 'abcd'), 'x');
    const outside = join(dir, 'outside');
    writeFileSync(outside, 'x');
    chmodSync(outside, 0o644);
    symlinkSync(outside, join(root, 'blobs', 'link'));
    for (const p of ['blobs', 'blobs/sha256', 'blobs/sha256/ab']) chmodSync(join(root, p), 0o755);
    chmodSync(join(root, 'blobs', 'sha256', 'ab', 'abcd'), 0o644);
    const t = new ModeTightener();
    t.tree(root, 0o700, 0o600);
    for (const p of ['blobs', 'blobs/sha256', 'blobs/sha256/ab']) expect(modeOf(join(root, p)), p).toBe(0o700);
    expect(modeOf(join(root, 'blobs', 'sha256', 'ab', 'abcd'))).toBe(0o600);
    expect(modeOf(outside)).toBe(0o644);
    expect(t.problems).toEqual([]);
  });

  it('says what it cannot do, naming the path, and lists at most twenty problems', () => {
    const t = new ModeTightener();
    for (let i = 0; i < 25; i++) {
      const link = join(dir, `l${i}`);
      symlinkSync('/nowhere', link);
      t.set(link, 0o600);
    }
    expect(t.problems).toHaveLength(21);
    expect(t.problems[0]).toContain(join(dir, 'l0'));
    expect(t.problems[20]).toBe('… and 5 more');
  });
});

describe('makeDirectories', () => {
  it('gives every directory it makes the mode, whatever the umask, and leaves those already there', () => {
    const before = process.umask(0o077);
    try {
      chmodSync(dir, 0o755);
      makeDirectories(join(dir, 'a', 'b', 'c'), 0o711);
      expect([modeOf(dir), modeOf(join(dir, 'a')), modeOf(join(dir, 'a', 'b')), modeOf(join(dir, 'a', 'b', 'c'))]).toEqual([0o755, 0o711, 0o711, 0o711]);
      makeDirectories(join(dir, 'a', 'b', 'c'), 0o700);
      expect(modeOf(join(dir, 'a', 'b', 'c'))).toBe(0o711);
    } finally {
      process.umask(before);
    }
  });
});
