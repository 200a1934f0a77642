import { afterEach, describe, expect, it, vi } from 'vitest';
import { sleep } from './sleep.js';

describe('sleep', () => {
  afterEach(() => void vi.useRealTimers());

  it('resolves after the delay', async () => {
    vi.useFakeTimers();
    let done = false;
    void sleep(1000).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(999);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(done).toBe(true);
  });

  it('resolves when the signal aborts, and leaves no timer behind', async () => {
    vi.useFakeTimers();
    const ac = new AbortController();
    const slept = sleep(60_000, ac.signal);
    ac.abort();
    await slept;
    expect(vi.getTimerCount()).toBe(0);
  });

  it('resolves at once on a signal already aborted', async () => {
    vi.useFakeTimers();
    await sleep(60_000, AbortSignal.abort());
    expect(vi.getTimerCount()).toBe(0);
  });
});
