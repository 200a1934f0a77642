import { describe, expect, it } from 'vitest';
import { MemoryBus } from '../bus/memory-bus.js';
import type { Store } from '../store/store.js';
import { OutboxRelay } from './outbox-relay.js';

describe('OutboxRelay', () => {
  it("publishes two replicas' in-memory messages of the same number as two (a bus drops a repeated id)", async () => {
    // One bus, as NATS is between replicas: it drops a message whose id it has seen.
    const bus = new MemoryBus();
    const got: string[] = [];
    bus.subscribe('events:written', (m) => void got.push(m.id));
    const clock = { now: () => 0 };
    const a = new OutboxRelay({} as Store, bus, clock);
    const b = new OutboxRelay({} as Store, bus, clock);
    // Each process numbers its own from 1: both wrote message 1.
    a.published([{ id: 1, topic: 'events:written', payload: {}, createdAt: 0, stored: false }]);
    b.published([{ id: 1, topic: 'events:written', payload: {}, createdAt: 0, stored: false }]);
    await new Promise((r) => setTimeout(r, 10));
    expect(got).toHaveLength(2);
    expect(new Set(got).size).toBe(2);
  });
});
