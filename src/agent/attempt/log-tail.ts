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
 *
 * Logs keep both ends: once the server answers `capped` (the log filled its head), nothing more is
 * shipped while the process runs; `drain` then ships each stream's last bytes, `tailBytes` in all
 * (tailStarts), as `tail` pieces, the first of which starts past the server's mark where bytes are
 * cut. The plan is made once a tail, from the server's marks, so a resend after a lost answer, or
 * a restart (which asks the marks first), goes on where the server is and cuts nothing twice.
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
  /** The server said `capped`: the log filled its head, and only its tail is taken, once the process has ended. */
  private headFull = false;
  /** With `headFull`: how many bytes of its end the server keeps; null from a server that keeps no tail (it takes nothing more). */
  private tailBytes: number | null = null;
  /** Where each stream's tail starts, planned once the process has ended (tailStarts). */
  private tailFrom: { stdout: number; stderr: number } | null = null;
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

  /** The server said its head is full (docs/agent.md, "Logs"): past it only the tail is shipped. */
  get capped(): boolean {
    return this.headFull;
  }

  /** How long each file is now. */
  sizes(): { stdout: number; stderr: number } {
    return { stdout: size(this.files.stdout), stderr: size(this.files.stderr) };
  }

  /**
   * The server has confirmed every byte the files hold now that it will take (past the head's cap:
   * the tail; what lies between is cut): nothing of the log it keeps is on this machine alone, and
   * the files may go (agent-state.ts, removeLogs).
   */
  shippedAll(): boolean {
    return this.unshipped() === 0;
  }

  /** Bytes the files hold beyond what the server has confirmed (all of them while unknown). */
  unshipped(): number {
    // A server from before tails takes nothing more once capped.
    if (this.headFull && this.tailBytes === null) return 0;
    const ends = this.sizes();
    const marks = this.marks ?? { stdout: 0, stderr: 0 };
    const from = this.headFull ? (this.tailFrom ?? tailStarts(marks, ends, this.tailBytes!)) : marks;
    return STREAMS.reduce((n, s) => n + Math.max(0, ends[s] - Math.max(marks[s], from[s])), 0);
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
      if (this.stopped || this.waitsForEnd(final)) return;
      const ends = this.sizes();
      if (ends.stdout === 0 && ends.stderr === 0) return;
      // After a restart: where does the server's copy end? (An empty request only asks.)
      this.marks ??= this.accept(await this.send([]));
      if (this.waitsForEnd(final)) return;
      const marks = this.marks;
      // Past the head: the process has ended, and its tail goes (planned once, from the server's marks).
      const tail = this.headFull;
      if (tail) this.tailFrom ??= tailStarts(marks, ends, this.tailBytes!);
      const pieces: LogChunk[] = [];
      let chars = 0;
      fill: for (const stream of STREAMS) {
        const from = tail ? Math.max(marks[stream], this.tailFrom![stream]) : marks[stream];
        for (let at = from; at < ends[stream];) {
          // The tail's first piece past the mark may start inside a character: it starts at the next whole one.
          const piece = await this.read(
            stream,
            at,
            Math.min(this.pieceBytes, ends[stream] - at),
            final && at + this.pieceBytes >= ends[stream],
            at === from && from > marks[stream],
          );
          if (!piece) break;
          const cost = JSON.stringify(piece.data).length + 100;
          if (pieces.length > 0 && chars + cost > this.requestChars) break fill;
          pieces.push(tail ? { ...piece, tail: true } : piece);
          chars += cost;
          at = piece.offset + piece.bytes;
        }
      }
      if (pieces.length === 0) return;
      const before = marks.stdout + marks.stderr;
      this.marks = this.accept(await this.send(pieces));
      if (this.marks.stdout + this.marks.stderr === before) {
        // The head filled with this request's first pieces: what follows waits for the end, as the tail.
        if (this.headFull && !tail) continue;
        // The server took none of it (it holds another cut of these bytes): its marks say where to go on from; a
        // second round without progress would loop forever.
        throw new Error(`the server took none of ${pieces.length} log piece(s) at offsets it asked for`);
      }
    }
  }

  /** Past the head, nothing goes while the process runs; to a server that keeps no tail, nothing goes at all. */
  private waitsForEnd(final: boolean): boolean {
    return this.headFull && (!final || this.tailBytes === null);
  }

  private accept(m: LogsResponse): { stdout: number; stderr: number } {
    if (m.capped) {
      this.headFull = true;
      this.tailBytes = m.tailBytes ?? null;
    }
    return { stdout: m.stdout, stderr: m.stderr };
  }

  /**
   * Up to `max` bytes of the stream from `at`, decoded, ending on a whole UTF-8 character unless
   * `toEnd` (the process is over and this is the file's last piece: a broken character there is
   * what it wrote). Null when only part of a character is there yet. `fromWhole`: it may start inside a
   * character (a tail's start): the bytes before the next whole one are left out.
   */
  private async read(stream: LogStream, at: number, max: number, toEnd: boolean, fromWhole = false): Promise<LogChunk | null> {
    let h = this.handles.get(stream);
    if (!h) {
      h = await open(this.files[stream], 'r');
      this.handles.set(stream, h);
    }
    const buf = Buffer.allocUnsafe(max);
    const { bytesRead } = await h.read(buf, 0, max, at);
    if (bytesRead === 0) return null;
    const cut = toEnd && bytesRead === max ? bytesRead : wholeCharacters(buf, bytesRead);
    let lead = 0;
    // At most 3 continuation bytes (10xxxxxx) end a character begun before `at`.
    if (fromWhole) while (lead < 3 && lead < cut && (buf[lead]! & 0xc0) === 0x80) lead++;
    if (cut - lead <= 0) return null;
    return { stream, offset: at + lead, bytes: cut - lead, data: buf.toString('utf8', lead, cut) };
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

/**
 * Where each stream's tail starts: the last `budget` bytes of what the server lacks, shared between
 * the streams (each gets up to half, and what one does not need goes to the other); never before
 * the server's mark.
 */
export function tailStarts(
  marks: { stdout: number; stderr: number },
  ends: { stdout: number; stderr: number },
  budget: number,
): { stdout: number; stderr: number } {
  const left = { stdout: Math.max(0, ends.stdout - marks.stdout), stderr: Math.max(0, ends.stderr - marks.stderr) };
  const half = Math.floor(budget / 2);
  const err = Math.min(left.stderr, half);
  const out = Math.min(left.stdout, budget - err);
  const errAll = Math.min(left.stderr, budget - out);
  return { stdout: ends.stdout - out, stderr: ends.stderr - errAll };
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
