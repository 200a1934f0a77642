import { appendFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LogChunk } from '../link/agent-client.js';
import type { LogsResponse } from '../../api/contract/agent-protocol.js';
import { LogTail, tailStarts, wholeCharacters } from './log-tail.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gantry-tail-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The server's side of the protocol, as the store implements it: each byte once, gaps wait. */
class FakeServer {
  readonly stored = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
  requests: LogChunk[][] = [];
  /** Fail the next n calls: 'before' (nothing stored) or 'after' (stored, the answer lost). */
  failures: ('before' | 'after')[] = [];

  send = async (pieces: LogChunk[]): Promise<LogsResponse> => {
    this.requests.push(pieces);
    const fail = this.failures.shift();
    if (fail === 'before') throw Object.assign(new TypeError('fetch failed'), {});
    for (const p of pieces) {
      const have = this.stored[p.stream].length;
      if (p.offset + p.bytes <= have || p.offset !== have) continue;
      this.stored[p.stream] = Buffer.concat([this.stored[p.stream], Buffer.from(p.data)]);
    }
    if (fail === 'after') throw new TypeError('fetch failed');
    return { stdout: this.stored.stdout.length, stderr: this.stored.stderr.length, capped: false };
  };
}

/**
 * The server past its head's cap, as the store implements it (attempt-verbs.ts, attemptLogAppend):
 * once `headBytes` are stored, pieces shipped as the process runs are not taken; a tail piece past
 * the mark cuts the bytes between, and a line says so. `tailBytes` null: a server from before tails.
 */
class CappedServer {
  readonly stored = { stdout: '', stderr: '' };
  readonly marks = { stdout: 0, stderr: 0 };
  /** What each stream's tail pieces were, in order: the cut lines with them. */
  readonly log: string[] = [];
  requests: LogChunk[][] = [];
  /** Fail the next n calls after storing (the answer lost). */
  lose = 0;
  private bytes = 0;

  constructor(
    private readonly headBytes: number,
    private readonly tailBytes: number | null,
  ) {}

  private get capped(): boolean {
    return this.bytes >= this.headBytes;
  }

  send = async (pieces: LogChunk[]): Promise<LogsResponse> => {
    this.requests.push(pieces);
    const blocked = { stdout: false, stderr: false };
    for (const p of pieces) {
      const mark = this.marks[p.stream];
      if (blocked[p.stream] || p.offset + p.bytes <= mark) continue;
      const skips = p.offset > mark && p.tail === true && this.capped && this.tailBytes !== null;
      if ((p.offset !== mark && !skips) || (p.tail !== true && this.capped)) {
        blocked[p.stream] = true;
        continue;
      }
      if (skips) this.log.push(`[cut ${p.stream} ${mark}-${p.offset}]`);
      this.log.push(p.data);
      this.stored[p.stream] += p.data;
      this.marks[p.stream] = p.offset + p.bytes;
      this.bytes += p.bytes;
    }
    if (this.lose-- > 0) throw new TypeError('fetch failed');
    return { ...this.marks, capped: this.capped, ...(this.capped && this.tailBytes !== null ? { tailBytes: this.tailBytes } : {}) };
  };
}

function files() {
  const f = { stdout: join(dir, 'stdout.log'), stderr: join(dir, 'stderr.log') };
  writeFileSync(f.stdout, '');
  writeFileSync(f.stderr, '');
  return f;
}

describe('LogTail', () => {
  it('sends nothing for a command that printed nothing', async () => {
    const server = new FakeServer();
    await new LogTail({ files: files(), send: server.send, known: { stdout: 0, stderr: 0 } }).drain();
    expect(server.requests).toEqual([]);
  });

  it('ships both streams whole, across failures before and after the server stored them, without a byte twice', async () => {
    const server = new FakeServer();
    const f = files();
    const tail = new LogTail({ files: f, send: server.send, known: { stdout: 0, stderr: 0 }, pieceBytes: 1000 });
    const out = Array.from({ length: 500 }, (_, i) => `line ${i}\n`).join('');
    appendFileSync(f.stdout, out);
    appendFileSync(f.stderr, 'warning\n');
    server.failures = ['before', 'after', 'after'];
    for (let i = 0; i < 3; i++) await expect(tail.drain()).rejects.toThrow(/fetch failed/);
    await tail.drain();
    expect(server.stored.stdout.toString()).toBe(out);
    expect(server.stored.stderr.toString()).toBe('warning\n');
    expect(tail.shipped).toEqual({ stdout: Buffer.byteLength(out), stderr: 8 });
    expect(tail.unshipped()).toBe(0);
  });

  it('follows a running command, and after a restart asks where the server is before going on', async () => {
    const server = new FakeServer();
    const f = files();
    const first = new LogTail({ files: f, send: server.send, known: { stdout: 0, stderr: 0 }, intervalMs: 20 });
    first.follow();
    appendFileSync(f.stdout, 'before the crash\n');
    for (let i = 0; i < 100 && server.stored.stdout.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    first.stop();
    expect(server.stored.stdout.toString()).toBe('before the crash\n');
    appendFileSync(f.stdout, 'after it\n');
    server.requests = [];
    const second = new LogTail({ files: f, send: server.send, known: null });
    await second.drain();
    expect(server.requests[0]).toEqual([]);
    expect(server.requests[1]).toEqual([{ stream: 'stdout', offset: 17, bytes: 9, data: 'after it\n' }]);
    expect(server.stored.stdout.toString()).toBe('before the crash\nafter it\n');
  });

  it('never splits a character between pieces while the command runs, and sends a broken one at the end as it is', async () => {
    const server = new FakeServer();
    const f = files();
    const tail = new LogTail({ files: f, send: server.send, known: { stdout: 0, stderr: 0 }, pieceBytes: 4 });
    appendFileSync(f.stdout, 'ab€€'); // 2 + 3 + 3 bytes: pieces of 4 would cut a €
    appendFileSync(f.stdout, Buffer.from([0xe2, 0x82])); // the start of a third €, never finished
    await tail.drain();
    expect(server.stored.stdout.toString()).toBe('ab€€\ufffd');
    expect(server.requests.flat().every((p) => p.bytes > 0 && !p.data.slice(0, -1).includes('\ufffd'))).toBe(true);
  });

  it('past the head ships nothing more while the command runs, then its tail once it has ended, the cut before it', async () => {
    const server = new CappedServer(100, 30);
    const f = files();
    const tail = new LogTail({ files: f, send: server.send, known: { stdout: 0, stderr: 0 }, pieceBytes: 40 });
    const lines = Array.from({ length: 100 }, (_, i) => `line ${String(i).padStart(3, '0')}\n`); // 9 bytes each
    appendFileSync(f.stdout, lines.slice(0, 50).join(''));
    // A round while it runs fills the head: the pieces after the one that filled it are not taken, and nothing more goes.
    await (tail as unknown as { ship(final: boolean): Promise<void> }).ship(false);
    expect(server.marks.stdout).toBe(120);
    appendFileSync(f.stdout, lines.slice(50).join(''));
    const before = server.requests.length;
    await (tail as unknown as { ship(final: boolean): Promise<void> }).ship(false);
    expect(server.requests.length).toBe(before);
    // Until the tail goes, the files hold 30 bytes the server will take (and the cut, which it never will).
    expect(tail.unshipped()).toBe(30);
    expect(tail.shippedAll()).toBe(false);
    await tail.drain();
    expect(server.log.slice(-2)).toEqual(['[cut stdout 120-870]', '96\nline 097\nline 098\nline 099\n']);
    expect(server.requests.at(-1)!.every((p) => p.tail === true)).toBe(true);
    expect(tail.unshipped()).toBe(0);
    expect(tail.shippedAll()).toBe(true);
  });

  it('a tail whose answer was lost, resent after a restart, is cut once and stored once; it starts on a whole character', async () => {
    const server = new CappedServer(10, 8);
    const f = files();
    appendFileSync(f.stdout, 'head......\n'); // 11 bytes: the head is full
    appendFileSync(f.stdout, 'x'.repeat(50) + '€€€'); // stdout's half of the tail (4 bytes) starts inside the second €
    appendFileSync(f.stderr, 'boom\n');
    const first = new LogTail({ files: f, send: server.send, known: { stdout: 0, stderr: 0 }, pieceBytes: 11 });
    await (first as unknown as { ship(final: boolean): Promise<void> }).ship(false);
    expect(server.marks.stdout).toBe(11);
    server.lose = 1;
    await expect(first.drain()).rejects.toThrow(/fetch failed/);
    const again = new LogTail({ files: f, send: server.send, known: null });
    await again.drain();
    expect(server.log.filter((l) => l.startsWith('[cut')).length).toBe(2);
    expect(server.log).toEqual(['head......\n', '[cut stdout 11-67]', '€', '[cut stderr 0-1]', 'oom\n']);
    expect(again.shippedAll()).toBe(true);
  });

  it('to a server that keeps no tail, nothing more goes past the head, and nothing is owed', async () => {
    const server = new CappedServer(10, null);
    const f = files();
    const tail = new LogTail({ files: f, send: server.send, known: { stdout: 0, stderr: 0 } });
    appendFileSync(f.stdout, 'x'.repeat(20) + '\n');
    await (tail as unknown as { ship(final: boolean): Promise<void> }).ship(false);
    appendFileSync(f.stdout, 'the end\n');
    await tail.drain();
    expect(server.stored.stdout).toBe('x'.repeat(20) + '\n');
    expect(tail.shippedAll()).toBe(true);
  });

  it('tailStarts shares the tail between the streams, never before the marks', () => {
    expect(tailStarts({ stdout: 0, stderr: 0 }, { stdout: 100, stderr: 100 }, 20)).toEqual({ stdout: 90, stderr: 90 });
    // What stderr does not need goes to stdout, and the other way round.
    expect(tailStarts({ stdout: 0, stderr: 0 }, { stdout: 100, stderr: 2 }, 20)).toEqual({ stdout: 82, stderr: 0 });
    expect(tailStarts({ stdout: 50, stderr: 0 }, { stdout: 52, stderr: 100 }, 20)).toEqual({ stdout: 50, stderr: 82 });
    // Less than the tail left: all of it, from the marks.
    expect(tailStarts({ stdout: 40, stderr: 7 }, { stdout: 45, stderr: 9 }, 20)).toEqual({ stdout: 40, stderr: 7 });
  });

  it('wholeCharacters cuts before an unfinished UTF-8 sequence only', () => {
    const b = Buffer.from('a€', 'utf8'); // 61 e2 82 ac
    expect(wholeCharacters(b, 4)).toBe(4);
    expect(wholeCharacters(b, 3)).toBe(1);
    expect(wholeCharacters(b, 2)).toBe(1);
    expect(wholeCharacters(b, 1)).toBe(1);
    expect(wholeCharacters(Buffer.from([0x80, 0x80, 0x80, 0x80, 0x80]), 5)).toBe(5);
  });
});
