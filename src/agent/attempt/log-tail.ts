/**
 * Ships one attempt's log from its files (process-runner.ts has the command write stdout and
 * stderr straight into them): each stream from the byte offset the server has reached, in pieces
 * the server stores once (a piece it already has is ignored), so a resend after a lost answer, a
 * server restart or an agent restart duplicates nothing and skips nothing. The server's answer is
 * the persisted offset: an agent that restarts asks it where each stream ends and goes on from
 * there. docs/agent.md, "Logs", has the whole protocol.
 *
 * While the process runs, `follow` ships what is new every `intervalMs` (a failure waits for the
 * next round, backing off to 5 s while they keep failing); once it has ended, `drain` ships everything up to the files' ends and throws if it
 * cannot, and the agent reports the outcome only after it succeeds. A command that prints nothing
 * costs two `stat`s and no request.
 */
import { statSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import type { LogsResponse } from '../../api/contract/agent-protocol.js';
import type { LogChunk } from '../link/agent-client.js';

export type LogStream = LogChunk['stream'];
const MAX_BACKOFF_MS = 5000;
const STREAMS: readonly LogStream[] = ['stdout', 'stderr'];

export interface LogTailOptions {
  files: Record<LogStream, string>;
  send: (pieces: LogChunk[]) => Promise<LogsResponse>;
  /** How far the server has each stream: 0 for an attempt that just started; null (unknown) after a restart: asked first. */
  known: { stdout: number; stderr: number } | null;
  intervalMs?: number;
  /** Bytes of a file read into one piece. */
  pieceBytes?: number;
  /** Pieces of one request together stay under this much JSON (the server's body limit is 1 MiB). */
  requestChars?: number;
  /** A `follow` round failed: StaleAttempt means the server no longer wants this attempt. */
  onError?: (err: unknown) => void;
}

export class LogTail {
  private readonly files: Record<LogStream, string>;
  private readonly send: LogTailOptions['send'];
  private readonly intervalMs: number;
  private readonly pieceBytes: number;
  private readonly requestChars: number;
  private readonly onError: (err: unknown) => void;
  private marks: { stdout: number; stderr: number } | null;
  private capped = false;
  private stopped = false;
  private timer: NodeJS.Timeout | null = null;
  private round: Promise<void> | null = null;
  /** The process is over: `follow` stops scheduling rounds. */
  private drained = false;
  private readonly handles = new Map<LogStream, FileHandle>();

  constructor(opts: LogTailOptions) {
    this.files = opts.files;
    this.send = opts.send;
    this.marks = opts.known ? { ...opts.known } : null;
    this.intervalMs = opts.intervalMs ?? 300;
    this.pieceBytes = opts.pieceBytes ?? 128 * 1024;
    // 128 KiB of bytes is at most 768 KiB of JSON (a control byte escapes to six characters).
    this.requestChars = opts.requestChars ?? 768 * 1024;
    this.onError = opts.onError ?? (() => {});
  }

  /** Bytes of each stream the server has confirmed (null before the first answer after a restart). */
  get shipped(): { stdout: number; stderr: number } | null {
    return this.marks ? { ...this.marks } : null;
  }

  /** While the process runs: what it wrote goes out every interval. */
  follow(): void {
    if (this.stopped || this.timer) return;
    // A round that fails (the server unreachable) waits twice as long before the next, up to
    // MAX_BACKOFF_MS; one that gets through goes back to the interval.
    let wait = this.intervalMs;
    const tick = () => {
      this.timer = null;
      if (this.stopped) return;
      void this.ship(false)
        .then(
          () => (wait = this.intervalMs),
          (err: unknown) => {
            wait = Math.min(MAX_BACKOFF_MS, wait * 2);
            this.onError(err);
          },
        )
        .finally(() => {
          if (!this.stopped && !this.drained) this.timer = setTimeout(tick, wait);
        });
    };
    this.timer = setTimeout(tick, wait);
  }

  /** Everything up to the files' current ends (the process is over); throws when the server cannot be reached or refuses. */
  async drain(): Promise<void> {
    this.drained = true;
    this.clearTimer();
    await this.ship(true);
    await this.closeFiles();
  }

  /** How long each file is now. */
  sizes(): { stdout: number; stderr: number } {
    return { stdout: size(this.files.stdout), stderr: size(this.files.stderr) };
  }

  /**
   * The server has confirmed every byte the files hold now (or counts the rest as taken: its cap
   * is reached): nothing of the log is on this machine alone, and the files may go (agent-state.ts, removeLogs).
   */
  shippedAll(): boolean {
    return this.unshipped() === 0;
  }

  /** Bytes the files hold beyond what the server has confirmed (all of them while unknown). */
  unshipped(): number {
    if (this.capped) return 0;
    const ends = this.sizes();
    return STREAMS.reduce((n, s) => n + Math.max(0, ends[s] - (this.marks?.[s] ?? 0)), 0);
  }

  /** The server no longer wants this attempt's log, or the agent stops: nothing more is sent. */
  stop(): void {
    this.stopped = true;
    this.clearTimer();
    void this.closeFiles();
  }

  /** One round at a time: a `drain` joins a `follow` round under way, then runs its own. */
  private async ship(final: boolean): Promise<void> {
    while (this.round) await this.round.catch(() => {});
    if (this.stopped) return;
    this.round = this.shipNow(final).finally(() => (this.round = null));
    return this.round;
  }

  private async shipNow(final: boolean): Promise<void> {
    for (;;) {
      if (this.stopped || this.capped) return;
      const ends = this.sizes();
      if (ends.stdout === 0 && ends.stderr === 0) return;
      // After a restart: where does the server's copy end? (An empty request only asks.)
      this.marks ??= this.accept(await this.send([]));
      const marks = this.marks;
      const pieces: LogChunk[] = [];
      let chars = 0;
      fill: for (const stream of STREAMS) {
        for (let at = marks[stream]; at < ends[stream];) {
          const piece = await this.read(stream, at, Math.min(this.pieceBytes, ends[stream] - at), final && at + this.pieceBytes >= ends[stream]);
          if (!piece) break;
          const cost = JSON.stringify(piece.data).length + 100;
          if (pieces.length > 0 && chars + cost > this.requestChars) break fill;
          pieces.push(piece);
          chars += cost;
          at += piece.bytes;
        }
      }
      if (pieces.length === 0) return;
      const before = marks.stdout + marks.stderr;
      this.marks = this.accept(await this.send(pieces));
      // The server took none of it (it holds another cut of these bytes): its marks say where to go on from; a
      // second round without progress would loop forever.
      if (this.marks.stdout + this.marks.stderr === before && !this.capped) {
        throw new Error(`the server took none of ${pieces.length} log piece(s) at offsets it asked for`);
      }
    }
  }

  private accept(m: LogsResponse): { stdout: number; stderr: number } {
    if (m.capped) this.capped = true;
    return { stdout: m.stdout, stderr: m.stderr };
  }

  /**
   * Up to `max` bytes of the stream from `at`, decoded, ending on a whole UTF-8 character unless
   * `toEnd` (the process is over and this is the file's last piece: a broken character there is
   * what it wrote). Null when only part of a character is there yet.
   */
  private async read(stream: LogStream, at: number, max: number, toEnd: boolean): Promise<LogChunk | null> {
    let h = this.handles.get(stream);
    if (!h) {
      h = await open(this.files[stream], 'r');
      this.handles.set(stream, h);
    }
    const buf = Buffer.allocUnsafe(max);
    const { bytesRead } = await h.read(buf, 0, max, at);
    if (bytesRead === 0) return null;
    const cut = toEnd && bytesRead === max ? bytesRead : wholeCharacters(buf, bytesRead);
    if (cut === 0) return null;
    return { stream, offset: at, bytes: cut, data: buf.toString('utf8', 0, cut) };
  }

  private async closeFiles(): Promise<void> {
    const hs = [...this.handles.values()];
    this.handles.clear();
    await Promise.all(hs.map((h) => h.close().catch(() => {})));
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}

/** A file's size; 0 when it does not exist (the command never started, or the directory was cleaned). */
function size(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** The length of the longest prefix of buf[0, n) that does not end inside a UTF-8 sequence. */
export function wholeCharacters(buf: Buffer, n: number): number {
  // Walk back over continuation bytes (10xxxxxx) to the last lead byte, at most 3 of them.
  let i = n - 1;
  while (i >= 0 && n - i <= 4 && (buf[i]! & 0xc0) === 0x80) i--;
  if (i < 0 || n - i > 4) return n; // not UTF-8 (a run of continuation bytes): take it as it is
  const lead = buf[i]!;
  const len = lead < 0x80 ? 1 : (lead & 0xe0) === 0xc0 ? 2 : (lead & 0xf0) === 0xe0 ? 3 : (lead & 0xf8) === 0xf0 ? 4 : 1;
  return i + len <= n ? n : i;
}
