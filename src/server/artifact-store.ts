import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, normalize, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { ValidationError } from '../domain/errors.js';

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

  async put(attemptId: string, rel: string, body: Readable): Promise<number> {
    const target = this.file(attemptId, rel);
    await mkdir(dirname(target), { recursive: true });
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
      const s = await stat(this.file(attemptId, rel));
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

  read(attemptId: string, rel: string): Readable {
    return createReadStream(this.file(attemptId, rel));
  }
}
