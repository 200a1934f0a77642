import { batchMessages, type Bus, type BusBatch, type BusHandler, type BusMessage } from './bus.js';
import { RecentIds } from './recent-ids.js';
import { Subscribers } from './subscribers.js';
import type { Topic } from '../domain/topic.js';

/** The in-process bus of the embedded default. Delivery is asynchronous, as a real bus's is; a
 *  repeated message id is delivered once, as NatsBus drops a repeat by its id. */
export class MemoryBus implements Bus {
  private subscribers = new Subscribers();
  private seen: RecentIds | null;

  /** `dedupe: false`: deliver repeats too (the chaos bus, which duplicates on purpose, sits on one). */
  constructor(opts: { dedupe?: boolean } = {}) {
    this.seen = opts.dedupe === false ? null : new RecentIds();
  }

  async publish(msg: BusMessage): Promise<void> {
    if (this.seen && !this.seen.first(msg.id)) return;
    this.subscribers.deliver(msg, queueMicrotask);
  }

  async publishBatch(batch: BusBatch): Promise<void> {
    for (const m of batchMessages(batch)) await this.publish(m);
  }

  subscribe<T extends Topic>(topic: T, handler: BusHandler<T>): () => void {
    return this.subscribers.add(topic, handler);
  }

  async close(): Promise<void> {
    this.subscribers.clear();
  }
}
