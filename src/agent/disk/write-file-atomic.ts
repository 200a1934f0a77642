/**
 * Files that are either absent or complete: written to a temporary file beside them, then renamed
 * over them, so a reader (the agent after a restart) never sees half of one. The file is fsynced
 * before the rename and the directory after it, so the file says the same after a power cut. Off
 * the event loop: an fsync waits for the disk and can take milliseconds. (The attempts' records
 * are lines of a journal instead: attempt-journal.ts.)
 */
import { randomBytes } from 'node:crypto';
import { open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Temporary names: this process (the pid alone can repeat across containers), then a counter. */
const TAG = `${process.pid}.${randomBytes(3).toString('hex')}`;
let seq = 0;
const tmpFor = (path: string) => join(dirname(path), `.${basename(path)}.${TAG}.${++seq}.tmp`);

/** `mode`: the file's permissions (0o600 for a secret), set when the temporary file is made, so it is never readable by others. */
export async function writeFileAtomic(path: string, data: string | Uint8Array, opts: { mode?: number } = {}): Promise<void> {
  const tmp = tmpFor(path);
  const fh = await open(tmp, 'w', opts.mode ?? 0o666);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await syncDir(dirname(path));
}

/** The rename is only durable once the directory entry is; not every platform lets us say so (attempt-journal.ts's compaction syncs with it too). */
export async function syncDir(dir: string): Promise<void> {
  let fh;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch {
    // EISDIR/EPERM on platforms without directory fsync: the file's own fsync is the best we get.
  } finally {
    await fh?.close();
  }
}
