import { constants, createWriteStream } from 'node:fs';
import { lstat, mkdir, open, realpath, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, normalize, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { NotFoundError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';

/**
 * Local artifacts: each attempt writes into its own directory, `<root>/<attemptId>/`, so two
 * attempts of one stage never touch the same files; which attempt's files a stage hands on is
 * decided by the pointer the database commits, not by the files.
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

  private file(attemptId: string, rel: string): string {
    if (!/^[a-z]+_[0-9a-z]+$/.test(attemptId)) throw new ValidationError([{ path: 'attemptId', message: 'malformed attempt id' }]);
    return join(this.root, attemptId, ArtifactStore.checkPath(rel));
  }

  /**
   * The directory a file goes in or comes from, resolved (symlinks followed), refused unless it is
   * still inside the attempt's own directory: a symlink put there (by hand, by another process)
   * must not lead a read or a write elsewhere on the server.
   */
  private async checkInside(attemptId: string, target: string): Promise<void> {
    const base = await realpath(join(this.root, attemptId));
    const dir = await realpath(dirname(target));
    if (dir !== base && !dir.startsWith(base + sep)) {
      throw new ValidationError([{ path: 'path', message: 'the path leads out of the attempt\'s directory (through a symbolic link)' }]);
    }
  }

  async put(attemptId: string, rel: string, body: Readable): Promise<number> {
    const target = this.file(attemptId, rel);
    await mkdir(dirname(target), { recursive: true });
    await this.checkInside(attemptId, target);
    const tmp = `${target}.part-${process.pid}-${Date.now()}`;
    try {
      await pipeline(body, createWriteStream(tmp));
      await rename(tmp, target);
    } catch (err) {
      // An upload cut short leaves nothing behind; the agent sends the file again.
      await rm(tmp, { force: true });
      throw err;
    }
    return (await stat(target)).size;
  }

  async size(attemptId: string, rel: string): Promise<number | null> {
    try {
      const target = this.file(attemptId, rel);
      await this.checkInside(attemptId, target);
      // The file itself not followed either: a symbolic link is not an uploaded file.
      const s = await lstat(target);
      return s.isFile() ? s.size : null;
    } catch {
      return null;
    }
  }

  /** Removes everything an attempt wrote (its job expired). */
  async remove(attemptId: string): Promise<void> {
    if (!/^[a-z]+_[0-9a-z]+$/.test(attemptId)) return;
    await rm(join(this.root, attemptId), { recursive: true, force: true });
  }

  /** The file, opened only if it is one, inside the attempt's directory, reached through no symbolic link. */
  async read(attemptId: string, rel: string): Promise<Readable> {
    const target = this.file(attemptId, rel);
    try {
      await this.checkInside(attemptId, target);
    } catch (err) {
      if (err instanceof ValidationError) throw new NotFoundError('output', rel);
      throw err;
    }
    // O_NOFOLLOW: a symbolic link in the file's own place is refused (ELOOP), not followed.
    const handle = await open(target, constants.O_RDONLY | constants.O_NOFOLLOW).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ELOOP') throw new NotFoundError('output', rel);
      throw err;
    });
    return handle.createReadStream();
  }
}
