import { describe, expect, it } from 'vitest';
import { MemoryBus } from '../bus/memory-bus.js';
import { Topic } from '../domain/topic.js';
import { machineWaiter } from './long-poll.js';

describe('machineWaiter', () => {
  const wake = (bus: MemoryBus, machineId: string) => bus.publish({ id: `w-${Math.random()}`, topic: Topic.machineWake, payload: { machineId } });

  it('each wait is for a wake-up after the last one, or one that came between; not for another machine', async () => {
    const bus = new MemoryBus();
    const shutdown = new AbortController();
    const w = machineWaiter(bus, 'm1', shutdown.signal);
    // A wake-up before the wait (between a read and the wait) is not missed.
    await wake(bus, 'm1');
    let t0 = Date.now();
    await w.wait(2000);
    expect(Date.now() - t0).toBeLessThan(500);
    // Used up: the next wait lasts until its time, a wake-up of another machine does not end it.
    t0 = Date.now();
    const waiting = w.wait(150);
    await wake(bus, 'm2');
    await waiting;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    // Woken in the middle.
    t0 = Date.now();
    const again = w.wait(5000);
    setTimeout(() => void wake(bus, 'm1'), 20);
    await again;
    expect(Date.now() - t0).toBeLessThan(2000);
    // Shutdown ends this wait and every later one.
    shutdown.abort();
    t0 = Date.now();
    await w.wait(5000);
    await w.wait(5000);
    expect(Date.now() - t0).toBeLessThan(500);
    w.done();
  });

  it('any number of waits held on one shutdown signal, without a listener warning, and none left after done', async () => {
    const bus = new MemoryBus();
    const shutdown = new AbortController();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const waiters = Array.from({ length: 50 }, (_, i) => machineWaiter(bus, `m${i}`, shutdown.signal));
      const held = waiters.map((w) => w.wait(5000));
      await new Promise((r) => setImmediate(r));
      shutdown.abort();
      await Promise.all(held);
      for (const w of waiters) w.done();
      await new Promise((r) => setImmediate(r));
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });
});
