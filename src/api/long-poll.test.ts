import { createHook } from 'node:async_hooks';
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { Bus, BusHandler } from '../bus/bus.js';
import { MemoryBus } from '../bus/memory-bus.js';
import { Topic } from '../domain/topic.js';
import { MachineWakes } from './long-poll.js';

describe('MachineWakes', () => {
  const wake = (bus: MemoryBus, machineId: string) => bus.publish({ id: `w-${Math.random()}`, topic: Topic.machineWake, payload: { machineId } });

  it('each wait is for a wake-up after the last one, or one that came between; not for another machine', async () => {
    const bus = new MemoryBus();
    const shutdown = new AbortController();
    const w = new MachineWakes(bus, shutdown.signal).waiter('m1');
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

  it('one subscription and one shutdown listener for every held wait; a wake-up calls only its machine’s waits', async () => {
    const handlers: BusHandler<typeof Topic.machineWake>[] = [];
    let unsubscribed = 0;
    const bus = {
      subscribe: (topic: string, h: BusHandler<typeof Topic.machineWake>) => {
        expect(topic).toBe(Topic.machineWake);
        handlers.push(h);
        return () => void unsubscribed++;
      },
    } as unknown as Bus;
    const shutdown = new AbortController();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const wakes = new MachineWakes(bus, shutdown.signal);
      const woken = new Set<string>();
      const waiters = Array.from({ length: 1000 }, (_, i) => ({ id: `m${i}`, w: wakes.waiter(`m${i}`) }));
      // An agent's retried poll may overlap the one before: both are woken.
      const twice = wakes.waiter('m7');
      const held = waiters.map(({ id, w }) => w.wait(60_000).then(() => woken.add(id)));
      const heldTwice = twice.wait(60_000).then(() => woken.add('m7 again'));
      expect(handlers).toHaveLength(1);
      expect(wakes.size).toBe(1001);
      handlers[0]!({ id: 'x', topic: Topic.machineWake, payload: { machineId: 'm7' } });
      await heldTwice;
      await held[7];
      await new Promise((r) => setImmediate(r));
      expect([...woken].sort()).toEqual(['m7', 'm7 again']);
      // Shutdown ends all of them, through one listener.
      shutdown.abort();
      await Promise.all(held);
      expect(woken.size).toBe(1001);
      for (const { w } of waiters) w.done();
      twice.done();
      expect(wakes.size).toBe(0);
      // A wait begun after shutdown ends at once.
      const late = wakes.waiter('m1');
      const t0 = Date.now();
      await late.wait(5000);
      expect(Date.now() - t0).toBeLessThan(500);
      late.done();
      await new Promise((r) => setImmediate(r));
      expect(warnings).not.toContain('MaxListenersExceededWarning');
      expect(unsubscribed).toBe(0);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a caller that hangs up ends its own wait, not the others', async () => {
    const bus = new MemoryBus();
    const wakes = new MachineWakes(bus, new AbortController().signal);
    const socket = new EventEmitter();
    const gone = wakes.waiter('m1', socket);
    const other = wakes.waiter('m1');
    let otherDone = false;
    const otherWait = other.wait(200).then(() => (otherDone = true));
    const t0 = Date.now();
    const goneWait = gone.wait(5000);
    socket.emit('close');
    await goneWait;
    expect(Date.now() - t0).toBeLessThan(150);
    expect(otherDone).toBe(false);
    await otherWait;
    // Ended by the hang-up, every later wait returns at once; done() takes its listener off the
    // socket (a keep-alive connection carries many heartbeats, one after another).
    const again = Date.now();
    await gone.wait(5000);
    expect(Date.now() - again).toBeLessThan(150);
    gone.done();
    other.done();
    expect(socket.listenerCount('close')).toBe(0);
    expect(wakes.size).toBe(0);
  });
  it('a held wait makes one promise, and a waiter no listener wrapper on its socket', async () => {
    // A held heartbeat lives a whole period, so what its wait allocates is promoted to the old
    // generation with it (docs/throughput.md, "Where a held heartbeat's allocations went").
    const bus = new MemoryBus();
    const wakes = new MachineWakes(bus, new AbortController().signal);
    const socket = new EventEmitter();
    const w = wakes.waiter('m1', socket);
    // `on`, not `once`: the listener itself, not a bound wrapper with its state.
    expect(socket.rawListeners('close')).toEqual(socket.listeners('close'));
    let promises = 0;
    const hook = createHook({ init: (_id, type) => void (type === 'PROMISE' && promises++) }).enable();
    const held = w.wait(60_000);
    hook.disable();
    expect(promises).toBe(1);
    await wake(bus, 'm1');
    expect(await held).toBe(true);
    w.done();
    expect(socket.listenerCount('close')).toBe(0);
  });
});
