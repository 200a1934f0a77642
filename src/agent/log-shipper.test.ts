import { describe, expect, it } from 'vitest';
import type { LogChunk } from './agent-client.js';
import { LogShipper } from './log-shipper.js';

describe('LogShipper', () => {
  it('merges output into batches under the request limit and sends all of it on close', async () => {
    const sent: LogChunk[][] = [];
    const s = new LogShipper({ send: async (c) => void sent.push(c), intervalMs: 10_000, maxRequestBytes: 100 });
    s.push({ stream: 'stdout', data: 'a'.repeat(40) });
    s.push({ stream: 'stdout', data: 'b'.repeat(40) });
    s.push({ stream: 'stderr', data: 'c'.repeat(30) });
    s.push({ stream: 'stdout', data: 'é'.repeat(200) }); // 400 bytes: split into pieces
    await s.close();
    for (const batch of sent) expect(batch.reduce((n, c) => n + Buffer.byteLength(c.data), 0)).toBeLessThanOrEqual(100);
    expect(sent[0]).toEqual([{ stream: 'stdout', data: 'a'.repeat(40) + 'b'.repeat(40) }]);
    const all = sent.flat();
    expect(all.filter((c) => c.stream === 'stdout').map((c) => c.data).join('')).toBe('a'.repeat(40) + 'b'.repeat(40) + 'é'.repeat(200));
    expect(all.filter((c) => c.stream === 'stderr').map((c) => c.data).join('')).toBe('c'.repeat(30));
    s.push({ stream: 'stdout', data: 'after close' });
    await s.flush();
    expect(sent.flat().some((c) => c.data === 'after close')).toBe(false);
  });

  it('ships on its interval without waiting for close', async () => {
    let resolveSent!: (c: LogChunk[]) => void;
    const first = new Promise<LogChunk[]>((r) => (resolveSent = r));
    const s = new LogShipper({ send: async (c) => resolveSent(c), intervalMs: 20 });
    s.push({ stream: 'stdout', data: 'tick' });
    expect(await first).toEqual([{ stream: 'stdout', data: 'tick' }]);
    s.stop();
  });

  it('drops what does not fit the buffer, says so, and survives failed sends', async () => {
    const sent: LogChunk[][] = [];
    const errors: unknown[] = [];
    let fail = true;
    const s = new LogShipper({
      send: async (c) => {
        if (fail) throw new Error('down');
        sent.push(c);
      },
      intervalMs: 10_000,
      maxBufferedBytes: 10,
      onError: (e) => errors.push(e),
    });
    s.push({ stream: 'stdout', data: '12345678' });
    s.push({ stream: 'stdout', data: 'too much' });
    await s.flush();
    expect(errors).toHaveLength(1);
    fail = false;
    s.push({ stream: 'stdout', data: 'ok' });
    await s.close();
    const text = sent.flat().map((c) => c.data).join('');
    expect(text).toContain('8 bytes of output not shipped');
    expect(text).toContain('ok');
  });
});
