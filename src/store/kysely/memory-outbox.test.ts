import { describe, expect, it } from 'vitest';
import { MemoryBus } from '../../bus/memory-bus.js';
import type { BusMessage } from '../../bus/bus.js';
import { OutboxRelay } from '../../reconciler/outbox-relay.js';
import { job, stage } from '../conformance/fixtures.js';
import type { OutboxMessage } from '../records.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';

describe('outbox kept in memory (a bus in this process)', () => {
  it('hands each commit its messages without writing a row; the relay publishes them and marks nothing', async () => {
    const store = await openSqliteStore(':memory:');
    try {
      store.keepOutboxInMemory();
      const bus = new MemoryBus();
      const got: BusMessage<'pool:ready'>[] = [];
      bus.subscribe('pool:ready', (m) => got.push(m));
      const relay = new OutboxRelay(store, bus, { now: () => 1 });
      const handed: OutboxMessage[] = [];
      store.onOutbox((ms) => {
        handed.push(...ms);
        relay.published(ms);
      });
      await store.jobSubmit({ definition: job([stage('a')]), source: null, now: 1 });
      await store.jobSubmit({ definition: job([stage('a')]), source: null, now: 2 });
      expect(handed.filter((m) => m.topic === 'pool:ready')).toHaveLength(2);
      expect(handed.every((m) => m.stored === false)).toBe(true);
      expect(await store.outboxPending({ limit: 10 })).toEqual([]);
      await new Promise((r) => setTimeout(r, 10));
      // Two messages, two ids (the bus de-duplicates by id): neither dropped as a repeat.
      expect(got.map((m) => m.payload.pool)).toEqual(['cpu', 'cpu']);
      expect(new Set(got.map((m) => m.id)).size).toBe(2);
      expect(relay.unmarked).toBe(0);
      expect(await relay.pass()).toBe(0);
    } finally {
      await store.close();
    }
  });
});
