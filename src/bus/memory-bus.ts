import type { Bus, BusHandler, BusMessage } from './bus.js';

/** The in-process bus of the embedded default. Delivery is asynchronous, as a real bus's is. */
export class MemoryBus implements Bus {
  private handlers = new Map<string, Set<BusHandler>>();

  async publish(msg: BusMessage): Promise<void> {
    const hs = this.handlers.get(msg.topic);
    if (!hs) return;
    for (const h of [...hs]) {
      queueMicrotask(() => {
        try {
          h(msg);
        } catch {
          // A consumer's failure is its own; the bus keeps delivering to the others.
        }
      });
    }
  }

  subscribe(topic: string, handler: BusHandler): () => void {
    let hs = this.handlers.get(topic);
    if (!hs) this.handlers.set(topic, (hs = new Set()));
    hs.add(handler);
    return () => hs!.delete(handler);
  }

  async close(): Promise<void> {
    this.handlers.clear();
  }
}
