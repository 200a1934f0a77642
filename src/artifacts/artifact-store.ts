import { createHash, randomBytes } from 'node:crypto';
import { constants, createWriteStream } from 'node:fs';
import { lstat, mkdir, open, readdir, realpath, rename, rm, rmdir, stat, unlink, utimes } from 'node:fs/promises';
import { dirname, join, normalize, sep } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { NotFoundError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';

const SHA256_KEY = /^sha256:([0-9a-f]{64})$/;
const LEGACY_KEY = /^legacy:([a-z]+_[0-9a-z]+)\/(.+)$/s;
const ATTEMPT_ID = /^[a-z]+_[0-9a-z]+$/;

/**
 * Local artifacts, content-addressed (docs/rerun.md): an output file is a blob named by its
 * sha256, `<root>/blobs/sha256/<ab>/<digest>`, written once however many stages of however many
 * jobs commit it; the database's manifests say which files a stage has and which blob each is.
 * Files written before 0014 stay where that version put them, `<root>/<attemptId>/<path>`, and
 * are blobs too, keyed `legacy:<attemptId>/<path>`.
 *
 * Blobs are written whole (a temporary file, then a rename) and never changed; the store decides
 * which to delete (artifactsCollect), and `collect` deletes one only if nobody has written it
 * again meanwhile.
 */
export class ArtifactStore {
  constructor(private readonly root: string) {}

  /** Rejects absolute paths, `..` and empty segments: a path names a file inside the attempt. */
  static checkPath(rel: string): string {
    const clean = normalize(rel).split(sep).join('/');
    if (!rel || rel.startsWith('/') || clean.startsWith('..') || clean.split('/').some((s) => s === '..' || s === '') || clean.includes('\0')) {
      throw new ValidationError([{ path: 'path', message: `"${rel}" is not a relative path inside the output directory` }]);
    }
    return clean;
  }

  /** The key of a file an earlier version wrote into its attempt's own directory. */
  static legacyKey(attemptId: string, rel: string): string {
    return `legacy:${attemptId}/${ArtifactStore.checkPath(rel)}`;
  }

  /** The digest a key names, for people (null for a legacy file, which has none). */
  static digestOf(key: string): string | null {
    return SHA256_KEY.exec(key)?.[1] ?? null;
  }

  /** Where a blob's bytes are; throws for a key that is neither form (never a path outside the root). */
  private fileOf(key: string): { file: string; legacyDir: string | null } {
    const sha = SHA256_KEY.exec(key);
    if (sha) return { file: join(this.root, 'blobs', 'sha256', sha[1]!.slice(0, 2), sha[1]!), legacyDir: null };
    const legacy = LEGACY_KEY.exec(key);
    if (legacy) {
      const dir = join(this.root, legacy[1]!);
      return { file: join(dir, ArtifactStore.checkPath(legacy[2]!)), legacyDir: dir };
    }
    throw new ValidationError([{ path: 'blob', message: `"${key.slice(0, 100)}" is not a blob key` }]);
  }

  /**
   * Stores an uploaded file: streamed into a temporary file while its sha256 is computed, then
   * moved to its blob's place, or, when that blob exists already, dropped and the blob's time
   * refreshed (so that collection, which spares what was written lately, leaves it alone). More than
   * `maxBytes` fails with `over()` as soon as they arrive, and leaves nothing.
   */
  async putBlob(
    body: Readable,
    maxBytes = Infinity,
    over: () => Error = () => new Error(`upload over ${maxBytes} bytes`),
  ): Promise<{ blob: string; size: number }> {
    const tmpDir = join(this.root, 'tmp');
    await mkdir(tmpDir, { recursive: true });
    const tmp = join(tmpDir, `${process.pid}-${Date.now()}-${randomBytes(6).toString('hex')}`);
    const hash = createHash('sha256');
    let size = 0;
    const digest = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        // Counted as the bytes arrive: the chunk that passes `maxBytes` fails the upload before it
        // is written, and the temporary file (never more than `maxBytes`) is removed below.
        if (size > maxBytes) return done(over());
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(body, digest, createWriteStream(tmp));
      const blob = `sha256:${hash.digest('hex')}`;
      const { file } = this.fileOf(blob);
      await mkdir(dirname(file), { recursive: true });
      try {
        const now = new Date();
        await utimes(file, now, now);
        await rm(tmp, { force: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
        // Not there (or being collected: renamed aside): this upload puts it in place.
        await rename(tmp, file);
      }
      return { blob, size };
    } catch (err) {
      // An upload cut short leaves nothing behind; the agent sends the file again.
      await rm(tmp, { force: true });
      throw err;
    }
  }

  /** The size of a file an earlier version's upload left in the attempt's directory, or null (for an outcome reported across the upgrade). */
  async legacySize(attemptId: string, rel: string): Promise<number | null> {
    try {
      const { file, legacyDir } = this.fileOf(ArtifactStore.legacyKey(attemptId, rel));
      await this.checkInside(legacyDir!, file);
      // The file itself not followed either: a symbolic link is not an uploaded file.
      const s = await lstat(file);
      return s.isFile() ? s.size : null;
    } catch {
      return null;
    }
  }

  /** Whether the blob's file is there with this size (a rerun's check of what it reuses). */
  async present(key: string, size: number): Promise<boolean> {
    try {
      const s = await lstat(this.fileOf(key).file);
      return s.isFile() && s.size === size;
    } catch {
      return false;
    }
  }

  /**
   * A legacy directory, resolved (symlinks followed), must still hold the file: a symlink put there
   * (by hand, by another process) must not lead a read elsewhere on the server.
   */
  private async checkInside(base: string, target: string): Promise<void> {
    const real = await realpath(base);
    const dir = await realpath(dirname(target));
    if (dir !== real && !dir.startsWith(real + sep)) {
      throw new ValidationError([{ path: 'path', message: "the path leads out of the attempt's directory (through a symbolic link)" }]);
    }
  }

  /** The blob's bytes, opened only if it is a file reached through no symbolic link. */
  async read(key: string, what = key): Promise<Readable> {
    const { file, legacyDir } = this.fileOf(key);
    const missing = () =>
      new NotFoundError('output', what, `output ${what} is not in the artifact store (its file ${ArtifactStore.digestOf(key) ?? key} is missing)`);
    if (legacyDir) {
      try {
        await this.checkInside(legacyDir, file);
      } catch (err) {
        if (err instanceof ValidationError || (err as NodeJS.ErrnoException).code === 'ENOENT') throw missing();
        throw err;
      }
    }
    // O_NOFOLLOW: a symbolic link in the file's own place is refused (ELOOP), not followed.
    const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ELOOP') throw missing();
      throw err;
    });
    return handle.createReadStream();
  }

  /**
   * Deletes a blob the store decided no one names, unless it was written after `freshSince` (an
   * upload of the same content under way, whose row is not committed yet): renamed aside first,
   * so an upload that comes now finds it gone and writes it anew; then, if it turns out fresh,
   * put back. Returns what happened.
   */
  async collect(key: string, freshSince: number): Promise<'deleted' | 'kept' | 'missing'> {
    const { file, legacyDir } = this.fileOf(key);
    const aside = `${file}.gc-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await rename(file, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
      throw err;
    }
    if ((await stat(aside)).mtimeMs >= freshSince) {
      // Same content whatever is there now: putting it back over a newer copy changes nothing.
      await rename(aside, file);
      return 'kept';
    }
    await unlink(aside);
    if (legacyDir) await this.pruneEmpty(dirname(file), legacyDir);
    return 'deleted';
  }

  /** Removes empty directories from `dir` up to and including `stop` (a legacy attempt's directory). */
  private async pruneEmpty(dir: string, stop: string): Promise<void> {
    for (let d = dir; d.startsWith(stop); d = dirname(d)) {
      try {
        await rmdir(d);
      } catch {
        return;
      }
      if (d === stop) return;
    }
  }

  /** Removes an attempt's directory written before 0014 (its job is deleted and no job names a file in it). */
  async removeLegacyDir(attemptId: string): Promise<void> {
    if (!ATTEMPT_ID.test(attemptId)) return;
    await rm(join(this.root, attemptId), { recursive: true, force: true });
  }

  /**
   * Files of the blob tree that a crash left behind (docs/rerun.md, "Files a crash leaves"): a
   * blob file no row names (collection deleted its row, then the server died before the file),
   * older than `before`, is collected as any unnamed blob is (renamed aside, put back if written
   * again meanwhile); a file renamed aside by a collection that died is put back where its row
   * still names it and its place is empty, else deleted, once the rename (its ctime) is older than
   * `before`. `known` says which keys have rows. Reads the whole tree: meant for a server's start
   * and then seldom, not for every collection.
   */
  async sweepStrays(known: (keys: string[]) => Promise<string[]>, before: number): Promise<{ collected: number; restored: number; removedAside: number }> {
    const out = { collected: 0, restored: 0, removedAside: 0 };
    const top = join(this.root, 'blobs', 'sha256');
    const dirs = await readdir(top).catch(() => [] as string[]);
    for (const d of dirs) {
      if (!/^[0-9a-f]{2}$/.test(d)) continue;
      const names = await readdir(join(top, d)).catch(() => [] as string[]);
      const blobs: string[] = [];
      const aside: { name: string; key: string }[] = [];
      for (const n of names) {
        const m = /^([0-9a-f]{64})(\.gc-.+)?$/.exec(n);
        if (!m || !m[1]!.startsWith(d)) continue;
        if (m[2]) aside.push({ name: n, key: `sha256:${m[1]}` });
        else blobs.push(n);
      }
      const keys = [...blobs.map((b) => `sha256:${b}`), ...aside.map((a) => a.key)];
      if (keys.length === 0) continue;
      const named = new Set(await known([...new Set(keys)]));
      for (const b of blobs) {
        const key = `sha256:${b}`;
        if (named.has(key)) continue;
        const s = await stat(join(top, d, b)).catch(() => null);
        if (!s || s.mtimeMs >= before) continue;
        if ((await this.collect(key, before)) === 'deleted') out.collected++;
      }
      for (const a of aside) {
        const f = join(top, d, a.name);
        const s = await stat(f).catch(() => null);
        if (!s || s.ctimeMs >= before) continue;
        const place = this.fileOf(a.key).file;
        if (named.has(a.key) && !(await stat(place).catch(() => null))) {
          await rename(f, place);
          out.restored++;
        } else {
          await rm(f, { force: true });
          out.removedAside++;
        }
      }
    }
    return out;
  }

  /** Temporary files of uploads that died with their server, older than `before` (ms). */
  async sweepTemporary(before: number): Promise<number> {
    const dir = join(this.root, 'tmp');
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return 0;
    }
    let removed = 0;
    for (const n of names) {
      const f = join(dir, n);
      const s = await stat(f).catch(() => null);
      if (s && s.mtimeMs < before) {
        await rm(f, { force: true });
        removed++;
      }
    }
    return removed;
  }
}
