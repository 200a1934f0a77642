import { describe, expect, it } from 'vitest';
import { batchMessages, type Bus, type BusBatch, type BusMessage } from '../bus/bus.js';
import { MemoryBus } from '../bus/memory-bus.js';
import { job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { OutboxMessage } from '../store/records.js';
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

  it('sends a row nobody marked once it is graceMs old, not before; one it sent itself it marks, never sends again', async () => {
    const store = await openSqliteStore(':memory:');
    try {
      const t0 = 1_700_000_000_000;
      let now = t0;
      const sent: string[] = [];
      // Every publish counted (a bus that drops repeats would hide a second send).
      const bus = { publish: async (m: { id: string }) => void sent.push(m.id) } as unknown as Bus;
      // Rows another replica wrote and published at once, not marked yet: this relay did not send them.
      await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
      const others = (await store.outboxPending({ limit: 100 })).map((m) => String(m.id));
      expect(others.length).toBeGreaterThan(0);
      const relay = new OutboxRelay(store, bus, { now: () => now }, () => {}, 3000);
      now = t0 + 2999;
      expect(await relay.pass()).toBe(0);
      expect(sent).toEqual([]);
      // Still unmarked 3 s on: its writer died before its pass; this one sends them, and marks them.
      now = t0 + 3000;
      expect(await relay.pass()).toBe(others.length);
      expect(sent).toEqual(others);
      expect(await store.outboxPending({ limit: 100 })).toEqual([]);
      // Its own: sent at once on commit, marked by its next pass, not sent again by it.
      sent.length = 0;
      await store.jobSubmit({ definition: job([stage('a')], { name: 'j2' }), source: null, now });
      const mine = await store.outboxPending({ limit: 100 });
      relay.published(mine);
      await new Promise((r) => setTimeout(r, 10));
      expect(await relay.pass()).toBe(0);
      expect(sent).toEqual(mine.map((m) => String(m.id)));
      expect(await store.outboxPending({ limit: 100 })).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("publishes a commit's row of several as one batch with the events' wake-up in it; its pass sends a row nobody marked as one publish", async () => {
    const store = await openSqliteStore(':memory:');
    try {
      const now = 1_700_000_000_000;
      const sent: string[] = [];
      const bus = {
        publish: async (m: BusMessage) => void sent.push(`${m.id} ${m.topic}`),
        publishBatch: async (b: BusBatch) => void sent.push(`${b.id} [${b.messages.map((m) => m.topic).join(', ')}]`),
      } as unknown as Bus;
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] } };
      const twoPools = (name: string) => store.jobSubmit({ definition: job([stage('a'), stage('g', { resources: gpu })], { name }), source: null, now });
      await twoPools('mine');
      const mine = await store.outboxPending({ limit: 100 });
      const relay = new OutboxRelay(store, bus, { now: () => now + 3000 }, () => {}, 3000);
      relay.published([...mine, { id: 9, topic: 'events:written', payload: {}, createdAt: now, stored: false }]);
      await new Promise((r) => setTimeout(r, 10));
      const row = mine[0]!.id;
      expect(sent).toEqual([`${row} [pool:ready, pool:ready, events:written]`]);
      // Marked by its pass, not sent again.
      expect(await relay.pass()).toBe(0);
      expect(await store.outboxPending({ limit: 100 })).toEqual([]);
      // Rows whose writer died before publishing: a row of several (one publish), and a row of one
      // message, as every row was before batches (one message, its id the row's).
      sent.length = 0;
      await twoPools('orphan');
      await store.jobSubmit({ definition: job([stage('a')], { name: 'one' }), source: null, now });
      const [batch, , single] = await store.outboxPending({ limit: 100 });
      expect(await relay.pass()).toBe(3);
      expect(sent).toEqual([`${batch!.id} [pool:ready, pool:ready]`, `${single!.id} pool:ready`]);
      expect(await store.outboxPending({ limit: 100 })).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it('tells the id each handled message goes out under, before the bus has it: in a batch, alone, and kept in memory', () => {
    const order: string[] = [];
    const bus = {
      publish: async (m: BusMessage) => void order.push(`bus ${m.id}`),
      publishBatch: async (b: BusBatch) => void order.push(...batchMessages(b).map((m) => `bus ${m.id}`)),
    } as unknown as Bus;
    const relay = new OutboxRelay({} as Store, bus, { now: () => 0 });
    const handled = (id: string) => void order.push(`handled ${id}`);
    const hint = (id: number, over: { part?: number; stored?: boolean; handled?: boolean }): OutboxMessage => ({
      id,
      topic: 'pool:ready',
      payload: { pool: 'cpu' },
      createdAt: 0,
      ...over,
    });
    // A row of three (the second not handled), the events' wake-up riding in its batch; then a row of one.
    relay.published(
      [
        hint(7, { part: 0, handled: true }),
        hint(7, { part: 1 }),
        { id: 7, part: 2, topic: 'capacity:freed', payload: { machineId: 'm' }, createdAt: 0, handled: true },
        { id: 1, topic: 'events:written', payload: {}, createdAt: 0, stored: false },
      ],
      handled,
    );
    relay.published([hint(8, { handled: true })], handled);
    // Kept in memory, no row: ids of this relay's own.
    relay.published([hint(2, { stored: false, handled: true }), hint(3, { stored: false })], handled);
    const mem = order.filter((x) => x.startsWith('bus mem:')).map((x) => x.slice(4));
    expect(mem).toHaveLength(2);
    expect(order).toEqual([
      'handled 7.0',
      'handled 7.2',
      'bus 7.0',
      'bus 7.1',
      'bus 7.2',
      'bus 7.3',
      'handled 8',
      'bus 8',
      `handled ${mem[0]}`,
      `bus ${mem[0]}`,
      `bus ${mem[1]}`,
    ]);
  });
});
