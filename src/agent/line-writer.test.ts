import { afterEach, describe, expect, it, vi } from 'vitest';
import { lineWriter } from './line-writer.js';

describe('lineWriter', () => {
  afterEach(() => vi.useRealTimers());

  it('writes the lines of a while together, a large batch at once, and what waits when the process exits', () => {
    vi.useFakeTimers();
    const writes: string[] = [];
    let atExit: (() => void) | null = null;
    const log = lineWriter({ write: (s: string) => (writes.push(s), true) }, { delayMs: 100, maxBytes: 20, onExit: (f) => (atExit = f) });
    log('one');
    log('two');
    expect(writes).toEqual([]);
    vi.advanceTimersByTime(99);
    expect(writes).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(writes).toEqual(['one\ntwo\n']);
    log('a line of twenty b'); // 19 bytes with its newline: waits
    log('x'); // 21: written at once
    expect(writes).toEqual(['one\ntwo\n', 'a line of twenty b\nx\n']);
    vi.advanceTimersByTime(500);
    expect(writes).toHaveLength(2);
    log('last');
    atExit!();
    expect(writes[2]).toBe('last\n');
    vi.advanceTimersByTime(500);
    expect(writes).toHaveLength(3);
  });
});
