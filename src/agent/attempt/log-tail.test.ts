import { appendFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LogChunk } from '../link/agent-client.js';
import type { LogsResponse } from '../../api/contract/agent-protocol.js';
import { LogTail, wholeCharacters } from './log-tail.js';

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

  it('wholeCharacters cuts before an unfinished UTF-8 sequence only', () => {
    const b = Buffer.from('a€', 'utf8'); // 61 e2 82 ac
    expect(wholeCharacters(b, 4)).toBe(4);
    expect(wholeCharacters(b, 3)).toBe(1);
    expect(wholeCharacters(b, 2)).toBe(1);
    expect(wholeCharacters(b, 1)).toBe(1);
    expect(wholeCharacters(Buffer.from([0x80, 0x80, 0x80, 0x80, 0x80]), 5)).toBe(5);
  });
});
