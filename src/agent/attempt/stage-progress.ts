import { lstat } from 'node:fs/promises';
import { openRegularFile } from '../disk/stage-tree.js';

/** What a stage says of its progress: a fraction done and a short message. */
export interface StageProgress {
  fraction: number;
  message?: string;
}

const TAIL_BYTES = 4096;
export const MAX_PROGRESS_MESSAGE = 200;

/**
 * The last well-formed line of a progress file (`{"progress": 0.42, "message": "epoch 3/10"}`, one
 * a line, the latest last), or null when there is none. Only the file's tail is read: a stage that
 * writes a line a step never makes this cost more than 4 KiB.
 */
export function parseProgressTail(text: string): StageProgress | null {
  const lines = text.split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!.trim();
    if (!line) continue;
    try {
      const v = JSON.parse(line) as { progress?: unknown; message?: unknown };
      if (typeof v.progress !== 'number' || !Number.isFinite(v.progress)) continue;
      const fraction = Math.min(1, Math.max(0, v.progress));
      return typeof v.message === 'string' && v.message ? { fraction, message: v.message.slice(0, MAX_PROGRESS_MESSAGE) } : { fraction };
    } catch {
      // A line being written, or not JSON: an earlier one may do.
    }
  }
  return null;
}

/**
 * Follows one attempt's GANTRY_PROGRESS_FILE: `changed()` reads it only when its size or mtime
 * moved since the last look, and answers the new progress only when it differs from the last
 * one sent, so a heartbeat carries progress only when there is news. The first look is `everyMs`
 * after the attempt starts: most short stages write no progress, and a look at a file that is not
 * there (a failed stat and its error) was a tenth of the agent's file work a stage.
 */
export class ProgressFile {
  private seen = '';
  private sent = '';
  private lookedAt: number;

  /** `everyMs`: looked at no more often than this (an agent under load polls many times a second). */
  constructor(
    readonly path: string,
    private readonly everyMs = 1000,
    private readonly now: () => number = Date.now,
  ) {
    this.lookedAt = now();
  }

  async changed(): Promise<StageProgress | null> {
    const t = this.now();
    if (t - this.lookedAt < this.everyMs) return null;
    this.lookedAt = t;
    // Never followed: the stage writes this file, and the agent reading it may be root. A link
    // (to a secret of the agent's), a FIFO or a device is not read (stage-tree.ts).
    let st;
    try {
      st = await lstat(this.path);
    } catch {
      return null;
    }
    if (!st.isFile()) return null;
    const mark = `${st.size}:${st.mtimeMs}`;
    if (mark === this.seen) return null;
    this.seen = mark;
    const fh = await openRegularFile(this.path);
    if (!fh) return null;
    try {
      const size = (await fh.stat()).size;
      const len = Math.min(TAIL_BYTES, size);
      const buf = Buffer.alloc(len);
      await fh.read(buf, 0, len, size - len);
      const p = parseProgressTail(buf.toString('utf8'));
      if (!p) return null;
      const key = JSON.stringify(p);
      if (key === this.sent) return null;
      this.sent = key;
      return p;
    } finally {
      await fh.close();
    }
  }
}
