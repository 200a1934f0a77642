/**
 * Files that are either absent or complete: written to a temporary file beside them, then renamed
 * over them, so a reader (the agent after a restart) never sees half of one.
 *
 * writeFileAtomic also fsyncs the file before the rename and the directory after it, so the file
 * says the same after a power cut: what the agent writes before it tells the server anything.
 * writeFileWhole does not: a crash of the agent alone loses nothing (the kernel's page cache
 * outlives the process), only a crash of the host can, and callers use it for records whose loss
 * the host crash itself makes harmless (see agent-state.ts).
 *
 * writeFileWhole is synchronous on purpose: a few system calls that only reach the page cache cost
 * less CPU than trips through libuv's thread pool, and the agent makes several per attempt. An
 * fsync waits for the disk and can take milliseconds, so writeFileAtomic stays off the event loop.
 */
import { randomBytes } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Temporary names: this process (the pid alone can repeat across containers), then a counter. */
const TAG = `${process.pid}.${randomBytes(3).toString('hex')}`;
let seq = 0;
const tmpFor = (path: string) => join(dirname(path), `.${basename(path)}.${TAG}.${++seq}.tmp`);

export async function writeFileAtomic(path: string, data: string | Uint8Array): Promise<void> {
  const tmp = tmpFor(path);
  const fh = await open(tmp, 'w');
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

export function writeFileWhole(path: string, data: string | Uint8Array): void {
  const tmp = tmpFor(path);
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/** The rename is only durable once the directory entry is; not every platform lets us say so. */
async function syncDir(dir: string): Promise<void> {
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
