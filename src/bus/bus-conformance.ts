import { afterEach, describe, expect, it } from 'vitest';
import type { Bus, BusMessage } from './bus.js';
import type { Topic } from '../domain/topic.js';

/**
 * What every Bus must do, run against each (memory-bus.test.ts, nats-bus.test.ts). `open` gives
 * two buses of one installation, as two replicas have (the in-process bus: the same one twice),
 * and `other` one of another installation sharing the transport.
 */
export function busConformance(name: string, make: { open(): Promise<[Bus, Bus]>; other?(): Promise<Bus> }): void {
  describe(`Bus conformance: ${name}`, () => {
    const opened: Bus[] = [];
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((b) => b.close()));
    });
    const open = async () => {
      const pair = await make.open();
      opened.push(...new Set(pair));
      return pair;
    };
    const collect = <T extends Topic>(bus: Bus, topic: T) => {
      const got: BusMessage<T>[] = [];
      bus.subscribe(topic, (m) => got.push(m));
      return got;
    };
    const until = async (cond: () => boolean, ms = 5000) => {
      const end = Date.now() + ms;
      while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    };

    it('delivers to the subscribers of the topic, on every replica, and to no other topic', async () => {
      const [a, b] = await open();
      const onA = collect(a, 'pool:ready');
      const onB = collect(b, 'pool:ready');
      const elsewhere = collect(b, 'machine:wake');
      await a.publish({ id: '1', topic: 'pool:ready', payload: { pool: 'cpu' } });
      await until(() => onA.length > 0 && onB.length > 0);
      expect(onA).toEqual([{ id: '1', topic: 'pool:ready', payload: { pool: 'cpu' } }]);
      expect(onB).toEqual(onA);
      await new Promise((r) => setTimeout(r, 50));
      expect(elsewhere).toEqual([]);
    });

    it('a message id published twice is delivered once', async () => {
      const [a, b] = await open();
      const got = collect(b, 'capacity:freed');
      await a.publish({ id: '7', topic: 'capacity:freed', payload: { machineId: 'm' } });
      await a.publish({ id: '7', topic: 'capacity:freed', payload: { machineId: 'm' } });
      await a.publish({ id: '8', topic: 'capacity:freed', payload: { machineId: 'n' } });
      await until(() => got.length >= 2);
      await new Promise((r) => setTimeout(r, 100));
      expect(got.map((m) => m.id)).toEqual(['7', '8']);
    });

    it("a batch's messages are delivered each, with ids <batch>.<i>, on every replica; a batch id published twice once", async () => {
      const [a, b] = await open();
      const ready = { a: collect(a, 'pool:ready'), b: collect(b, 'pool:ready') };
      const freed = collect(b, 'capacity:freed');
      const batch = {
        id: '40',
        messages: [
          { topic: 'pool:ready', payload: { pool: 'cpu' } },
          { topic: 'capacity:freed', payload: { machineId: 'm' } },
          { topic: 'pool:ready', payload: { pool: 'gpu' } },
        ] as const,
      };
      await a.publishBatch({ id: batch.id, messages: [...batch.messages] });
      await a.publishBatch({ id: batch.id, messages: [...batch.messages] });
      // A message alone with a member's id is that member again.
      await a.publish({ id: '40.1', topic: 'capacity:freed', payload: { machineId: 'm' } });
      await until(() => ready.a.length >= 2 && ready.b.length >= 2 && freed.length >= 1);
      await new Promise((r) => setTimeout(r, 100));
      expect(ready.b).toEqual([
        { id: '40.0', topic: 'pool:ready', payload: { pool: 'cpu' } },
        { id: '40.2', topic: 'pool:ready', payload: { pool: 'gpu' } },
      ]);
      expect(ready.a).toEqual(ready.b);
      expect(freed).toEqual([{ id: '40.1', topic: 'capacity:freed', payload: { machineId: 'm' } }]);
    });

    it('unsubscribing stops delivery; a throwing handler does not stop the others', async () => {
      const [a, b] = await open();
      const got: string[] = [];
      const off = b.subscribe('events:written', (m) => got.push(`first ${m.id}`));
      b.subscribe('events:written', () => {
        throw new Error('a broken consumer');
      });
      b.subscribe('events:written', (m) => got.push(`third ${m.id}`));
      await a.publish({ id: '1', topic: 'events:written', payload: {} });
      await until(() => got.length >= 2);
      off();
      await a.publish({ id: '2', topic: 'events:written', payload: {} });
      await until(() => got.length >= 3);
      expect(got).toEqual(['first 1', 'third 1', 'third 2']);
    });

    if (make.other) {
      it("another installation's messages never arrive", async () => {
        const [a] = await open();
        const other = await make.other!();
        opened.push(other);
        const got = collect(a, 'pool:ready');
        const theirs = collect(other, 'pool:ready');
        await other.publish({ id: '1', topic: 'pool:ready', payload: { pool: 'theirs' } });
        await until(() => theirs.length > 0);
        await a.publish({ id: '1', topic: 'pool:ready', payload: { pool: 'ours' } });
        await until(() => got.length > 0);
        await new Promise((r) => setTimeout(r, 100));
        expect(got.map((m) => m.payload.pool)).toEqual(['ours']);
      });
    }
  });
}
