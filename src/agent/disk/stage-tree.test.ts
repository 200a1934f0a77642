import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { listStageFiles, MAX_STAGE_TREE_DEPTH, openStageFile, removeStageTree, reownStageTree, StageFileRefused } from './stage-tree.js';

const root = process.getuid?.() === 0;
if (!root) console.warn('stage-tree.test.ts: the tests of owners skipped: not root, cannot give files to another uid');
const UID = 61184 + 901;

let dir: string;
let tree: string;
let outside: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gantry-stage-tree-'));
  tree = join(dir, 'output');
  outside = join(dir, 'secret');
  mkdirSync(tree);
  mkdirSync(outside);
  writeFileSync(join(outside, 'credential'), 'gantry_secret\n', { mode: 0o600 });
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: unknown) => e as StageFileRefused,
  );

describe('listStageFiles', () => {
  it('lists regular files depth first in name order, with their sizes', async () => {
    mkdirSync(join(tree, 'b', 'c'), { recursive: true });
    writeFileSync(join(tree, 'z.txt'), 'zz');
    writeFileSync(join(tree, 'b', 'c', 'deep.bin'), '12345');
    writeFileSync(join(tree, 'a.txt'), '');
    expect(await listStageFiles(tree)).toEqual([
      { path: 'a.txt', size: 0 },
      { path: 'b/c/deep.bin', size: 5 },
      { path: 'z.txt', size: 2 },
    ]);
  });

  it('refuses a symbolic link anywhere, naming it and where it points', async () => {
    mkdirSync(join(tree, 'ckpt'));
    writeFileSync(join(tree, 'ckpt', 'ok.txt'), 'ok');
    symlinkSync(join(outside, 'credential'), join(tree, 'ckpt', 'cred'));
    const err = await refusal(listStageFiles(tree));
    expect(err).toBeInstanceOf(StageFileRefused);
    expect(err!.path).toBe('ckpt/cred');
    expect(err!.message).toBe(`"ckpt/cred" is a symbolic link (to "${join(outside, 'credential')}")`);
    // A link to a directory is not walked either.
    rmSync(join(tree, 'ckpt'), { recursive: true });
    symlinkSync(outside, join(tree, 'all'));
    expect((await refusal(listStageFiles(tree)))!.path).toBe('all');
  });

  it('refuses a FIFO (reading it would hang) and a root that is a link', async () => {
    execFileSync('mkfifo', [join(tree, 'pipe')]);
    expect((await refusal(listStageFiles(tree)))!.message).toBe('"pipe" is a FIFO');
    const link = join(dir, 'link');
    symlinkSync(outside, link);
    expect((await refusal(listStageFiles(link)))!.message).toBe('"" is not a directory');
  });

  it('refuses a tree nested deeper than it walks', async () => {
    let d = tree;
    for (let i = 0; i <= MAX_STAGE_TREE_DEPTH + 1; i++) d = join(d, 'd');
    mkdirSync(d, { recursive: true });
    expect((await refusal(listStageFiles(tree)))!.why).toMatch(/nested deeper than/);
  });

  it.skipIf(!root)('refuses a file the stage does not own: a hard link to the agent’s credential', async () => {
    chownSync(tree, UID, UID);
    writeFileSync(join(tree, 'mine.txt'), 'mine');
    chownSync(join(tree, 'mine.txt'), UID, UID);
    expect(await listStageFiles(tree)).toEqual([{ path: 'mine.txt', size: 4 }]);
    execFileSync('ln', [join(outside, 'credential'), join(tree, 'hard')]);
    const err = await refusal(listStageFiles(tree));
    expect(err!.message).toBe(`"hard" is owned by uid 0, not by the stage's user (${UID}): a link to a file the stage did not write`);
    const err2 = await refusal(openStageFile(tree, 'hard'));
    expect(err2!.path).toBe('hard');
  });
});

describe('openStageFile', () => {
  it('opens a regular file below the root and nothing reached through a link', async () => {
    mkdirSync(join(tree, 'sub'));
    writeFileSync(join(tree, 'sub', 'f.txt'), 'content');
    const fh = await openStageFile(tree, 'sub/f.txt');
    try {
      expect((await fh.readFile()).toString()).toBe('content');
    } finally {
      await fh.close();
    }
    symlinkSync(join(outside, 'credential'), join(tree, 'cred'));
    expect((await refusal(openStageFile(tree, 'cred')))!.message).toMatch(/^"cred" is a symbolic link/);
    // A directory on the way swapped for a link (after the listing) is refused too.
    symlinkSync(outside, join(tree, 'via'));
    expect((await refusal(openStageFile(tree, 'via/credential')))!.message).toMatch(/^"via" is a symbolic link/);
  });
});

describe.skipIf(!root)('reownStageTree', () => {
  it('gives directories and files to the user, and never what a link names', async () => {
    mkdirSync(join(tree, 'ckpt'));
    writeFileSync(join(tree, 'ckpt', 'step-1.pt'), 'weights', { mode: 0o600 });
    symlinkSync(join(outside, 'credential'), join(tree, 'ckpt', 'cred'));
    symlinkSync(outside, join(tree, 'dirlink'));
    reownStageTree(tree, UID, UID);
    for (const p of [tree, join(tree, 'ckpt'), join(tree, 'ckpt', 'step-1.pt')]) expect([statSync(p).uid, statSync(p).gid]).toEqual([UID, UID]);
    expect(statSync(join(outside, 'credential')).uid).toBe(0);
    expect(statSync(outside).uid).toBe(0);
    // The links themselves are left as they were.
    expect(lstatSync(join(tree, 'ckpt', 'cred')).uid).toBe(0);
  });
});

describe('removeStageTree', () => {
  it('removes everything below, and nothing a link names', async () => {
    mkdirSync(join(tree, 'a', 'b'), { recursive: true });
    writeFileSync(join(tree, 'a', 'b', 'f'), 'x');
    symlinkSync(outside, join(tree, 'a', 'link-to-dir'));
    symlinkSync(join(outside, 'credential'), join(tree, 'link-to-file'));
    execFileSync('mkfifo', [join(tree, 'pipe')]);
    await removeStageTree(tree);
    expect(existsSync(tree)).toBe(false);
    expect(readdirSync(outside)).toEqual(['credential']);
    await removeStageTree(tree); // absent: nothing to do
    const link = join(dir, 'link');
    symlinkSync(outside, link);
    await removeStageTree(link);
    expect(existsSync(link)).toBe(false);
    expect(readdirSync(outside)).toEqual(['credential']);
  });
});
