import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import { createHash } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ArtifactStore } from './artifact-store.js';

describe('ArtifactStore', () => {
  let root: string;
  let store: ArtifactStore;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'gantry-artifacts-'));
    store = new ArtifactStore(root);
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  const sha = (s: string) => createHash('sha256').update(s).digest('hex');
  const old = (file: string) => utimesSync(file, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));

  it('stores a file once under its sha256, however many times it is uploaded', async () => {
    const a = await store.putBlob(Readable.from([Buffer.from('model '), Buffer.from('weights')]));
    expect(a).toEqual({ blob: `sha256:${sha('model weights')}`, size: 13 });
    const file = join(root, 'blobs', 'sha256', sha('model weights').slice(0, 2), sha('model weights'));
    expect(statSync(file).size).toBe(13);
    old(file);
    const b = await store.putBlob(Readable.from([Buffer.from('model weights')]));
    expect(b).toEqual(a);
    // Written again: not rewritten, but its time refreshed (collection spares it); no temporary file left.
    expect(statSync(file).mtimeMs).toBeGreaterThan(Date.now() - 60_000);
    expect(readdirSync(join(root, 'tmp'))).toEqual([]);
    expect(await text(await store.read(a.blob))).toBe('model weights');
    expect(await store.present(a.blob, 13)).toBe(true);
    expect(await store.present(a.blob, 12)).toBe(false);
    expect(ArtifactStore.digestOf(a.blob)).toBe(sha('model weights'));
  });

  it('an upload cut short leaves nothing behind', async () => {
    const broken = new Readable({
      read() {
        this.push(Buffer.from('partial'));
        this.destroy(new Error('connection reset'));
      },
    });
    await expect(store.putBlob(broken)).rejects.toThrow(/connection reset/);
    expect(readdirSync(join(root, 'tmp'))).toEqual([]);
    expect(existsSync(join(root, 'blobs'))).toBe(false);
  });

  it('sweeps what a crash left: unnamed old files collected, named files set aside put back, the rest of the set-aside copies removed', async () => {
    const put = async (t: string) => (await store.putBlob(Readable.from([Buffer.from(t)]))).blob;
    const file = (t: string) => join(root, 'blobs', 'sha256', sha(t).slice(0, 2), sha(t));
    const named = await put('named');
    const stray = await put('stray');
    const fresh = await put('fresh');
    const moved = await put('moved aside');
    const twice = await put('aside twice');
    await put('aside, gone');
    for (const t of ['named', 'stray', 'moved aside', 'aside twice', 'aside, gone']) old(file(t));
    renameSync(file('moved aside'), `${file('moved aside')}.gc-1-aa`);
    copyFileSync(file('aside twice'), `${file('aside twice')}.gc-1-bb`);
    renameSync(file('aside, gone'), `${file('aside, gone')}.gc-1-cc`);
    writeFileSync(join(root, 'blobs', 'sha256', 'README'), 'not a blob');
    const rows = new Set([named, moved, twice]);
    const asked: string[][] = [];
    const known = async (keys: string[]) => (asked.push(keys), keys.filter((k) => rows.has(k)));
    // Nothing is older than a time before all of them: nothing moves.
    expect(await store.sweepStrays(known, Date.now() - 3_600_000 * 2)).toEqual({ collected: 0, restored: 0, removedAside: 0 });
    const r = await store.sweepStrays(known, Date.now() + 1000);
    // 'fresh' was written now but `before` is later: it goes too (unnamed); the grace is the caller's.
    expect(r).toEqual({ collected: 2, restored: 1, removedAside: 2 });
    expect(existsSync(file('named'))).toBe(true);
    expect(existsSync(file('stray'))).toBe(false);
    expect(existsSync(file('fresh'))).toBe(false);
    expect(readFileSync(file('moved aside'), 'utf8')).toBe('moved aside');
    expect(existsSync(file('aside twice'))).toBe(true);
    expect(existsSync(file('aside, gone'))).toBe(false);
    expect(readdirSync(join(root, 'blobs', 'sha256')).includes('README')).toBe(true);
    for (const keys of asked) expect(keys.every((k) => /^sha256:[0-9a-f]{64}$/.test(k))).toBe(true);
    void stray;
    void fresh;
  });

  it('a fresh file no row names yet (an upload about to commit) is left to a later sweep', async () => {
    const { blob } = await store.putBlob(Readable.from([Buffer.from('uploading')]));
    expect(await store.sweepStrays(async () => [], Date.now() - 60_000)).toEqual({ collected: 0, restored: 0, removedAside: 0 });
    expect(await store.present(blob, 9)).toBe(true);
  });

  it('collects a blob unless it was written again lately; a missing one is said so', async () => {
    const { blob } = await store.putBlob(Readable.from([Buffer.from('x')]));
    const file = join(root, 'blobs', 'sha256', sha('x').slice(0, 2), sha('x'));
    expect(await store.collect(blob, Date.now() - 60_000)).toBe('kept');
    expect(existsSync(file)).toBe(true);
    old(file);
    expect(await store.collect(blob, Date.now() - 60_000)).toBe('deleted');
    expect(existsSync(file)).toBe(false);
    expect(readdirSync(join(root, 'blobs', 'sha256', sha('x').slice(0, 2)))).toEqual([]);
    expect(await store.collect(blob, Date.now())).toBe('missing');
    await expect(store.read(blob, 'train/model.bin')).rejects.toThrow(/output train\/model.bin is not in the artifact store/);
  });

  it("reads and collects files an earlier version wrote in the attempt's own directory", async () => {
    const dir = join(root, 'att_01abc', 'sub');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'out.txt'), 'old bytes');
    const key = ArtifactStore.legacyKey('att_01abc', 'sub/out.txt');
    expect(key).toBe('legacy:att_01abc/sub/out.txt');
    expect(ArtifactStore.digestOf(key)).toBeNull();
    expect(await store.legacySize('att_01abc', 'sub/out.txt')).toBe(9);
    expect(await text(await store.read(key))).toBe('old bytes');
    old(join(dir, 'out.txt'));
    expect(await store.collect(key, Date.now() - 60_000)).toBe('deleted');
    // The emptied directories go too.
    expect(existsSync(join(root, 'att_01abc'))).toBe(false);
    expect(() => ArtifactStore.legacyKey('att_01abc', '../escape')).toThrow(/not a relative path/);
    await expect(store.read('legacy:../../etc/passwd')).rejects.toThrow(/not a blob key/);
    await expect(store.read('sha256:nothex')).rejects.toThrow(/not a blob key/);
  });

  it('sweeps temporary files older than asked', async () => {
    mkdirSync(join(root, 'tmp'));
    writeFileSync(join(root, 'tmp', 'stale'), '');
    old(join(root, 'tmp', 'stale'));
    writeFileSync(join(root, 'tmp', 'fresh'), '');
    expect(await store.sweepTemporary(Date.now() - 60_000)).toBe(1);
    expect(readdirSync(join(root, 'tmp'))).toEqual(['fresh']);
  });
});
