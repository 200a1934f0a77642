/**
 * Batches one attempt's output into `logs` calls: every `intervalMs`, and all of it on close, one
 * request in flight at a time, each under `maxRequestBytes`. Shipping is best effort: a batch the
 * server does not take is dropped, and a buffer that fills while the server is unreachable drops
 * new output (and says so in the stream) rather than grow without bound. The log file on disk is
 * the complete copy either way.
 */
import type { LogChunk } from './agent-client.js';

export interface LogShipperOptions {
  send: (chunks: LogChunk[]) => Promise<void>;
  intervalMs?: number;
  maxRequestBytes?: number;
  maxBufferedBytes?: number;
  /** Called with each failed send; the batch is gone by then. */
  onError?: (err: unknown) => void;
}

interface Piece {
  stream: LogChunk['stream'];
  data: string;
  bytes: number;
}

/** LogsRequest allows 1000 chunks per request. */
const MAX_CHUNKS = 1000;

export class LogShipper {
  private readonly send: LogShipperOptions['send'];
  private readonly intervalMs: number;
  private readonly maxRequestBytes: number;
  private readonly maxBufferedBytes: number;
  private readonly onError: (err: unknown) => void;
  private queue: Piece[] = [];
  private queuedBytes = 0;
  private droppedBytes = 0;
  private timer: NodeJS.Timeout | null = null;
  private pumping: Promise<void> | null = null;
  private stopped = false;

  constructor(opts: LogShipperOptions) {
    this.send = opts.send;
    this.intervalMs = opts.intervalMs ?? 300;
    this.maxRequestBytes = opts.maxRequestBytes ?? 256 * 1024;
    this.maxBufferedBytes = opts.maxBufferedBytes ?? 8 * 1024 * 1024;
    this.onError = opts.onError ?? (() => {});
  }

  push(chunk: LogChunk): void {
    if (this.stopped || chunk.data === '') return;
    const bytes = Buffer.byteLength(chunk.data);
    if (this.queuedBytes + bytes > this.maxBufferedBytes) {
      this.droppedBytes += bytes;
      return;
    }
    if (this.droppedBytes > 0) {
      this.append('stderr', `\n[gantry agent: ${this.droppedBytes} bytes of output not shipped; the machine's log file has them]\n`);
      this.droppedBytes = 0;
    }
    this.append(chunk.stream, chunk.data, bytes);
    this.timer ??= setTimeout(() => {
      this.timer = null;
      void this.pump();
    }, this.intervalMs);
  }

  /** Sends everything buffered so far. */
  async flush(): Promise<void> {
    this.clearTimer();
    while (this.queue.length > 0 && !this.stopped) await this.pump();
    await this.pumping;
  }

  /** Sends what is left and stops; later output is ignored. */
  async close(): Promise<void> {
    await this.flush();
    this.stopped = true;
  }

  /** Stops at once, discarding what is buffered: the server no longer wants this attempt's logs. */
  stop(): void {
    this.stopped = true;
    this.clearTimer();
    this.queue = [];
    this.queuedBytes = 0;
  }

  private append(stream: LogChunk['stream'], data: string, bytes = Buffer.byteLength(data)): void {
    // Oversized output is cut into pieces that each fit a request; a UTF-16 unit is at most 3
    // bytes of UTF-8, so a third of the limit in units always fits.
    const maxUnits = Math.max(2, Math.floor(this.maxRequestBytes / 3));
    if (bytes > this.maxRequestBytes) {
      for (let i = 0; i < data.length; ) {
        let end = Math.min(data.length, i + maxUnits);
        // Never split a surrogate pair.
        if (end < data.length && /[\uD800-\uDBFF]/.test(data[end - 1]!)) end--;
        this.append(stream, data.slice(i, end));
        i = end;
      }
      return;
    }
    const last = this.queue.at(-1);
    if (last && last.stream === stream && last.bytes + bytes <= this.maxRequestBytes) {
      last.data += data;
      last.bytes += bytes;
    } else {
      this.queue.push({ stream, data, bytes });
    }
    this.queuedBytes += bytes;
  }

  private pump(): Promise<void> {
    this.pumping ??= (async () => {
      try {
        while (this.queue.length > 0 && !this.stopped) {
          const batch = this.take();
          try {
            await this.send(batch.map(({ stream, data }) => ({ stream, data })));
          } catch (err) {
            this.onError(err);
          }
        }
      } finally {
        this.pumping = null;
      }
    })();
    return this.pumping;
  }

  private take(): Piece[] {
    const batch: Piece[] = [];
    let bytes = 0;
    while (this.queue.length > 0 && batch.length < MAX_CHUNKS) {
      const next = this.queue[0]!;
      if (batch.length > 0 && bytes + next.bytes > this.maxRequestBytes) break;
      batch.push(this.queue.shift()!);
      bytes += next.bytes;
    }
    this.queuedBytes -= bytes;
    return batch;
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
