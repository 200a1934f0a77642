import type { BusHandler, BusMessage } from './bus.js';

/** Who listens to what, for a bus's own process: the part every Bus shares. */
export class Subscribers {
  private handlers = new Map<string, Set<BusHandler>>();

  add(topic: string, handler: BusHandler): () => void {
    let hs = this.handlers.get(topic);
    if (!hs) this.handlers.set(topic, (hs = new Set()));
    hs.add(handler);
    return () => hs!.delete(handler);
  }

  /** Hands `msg` to each handler of its topic; `schedule` says when (at once, or in a microtask). */
  deliver(msg: BusMessage, schedule: (run: () => void) => void = (run) => run()): void {
    const hs = this.handlers.get(msg.topic);
    if (!hs) return;
    for (const h of [...hs]) {
      schedule(() => {
        try {
          h(msg);
        } catch {
          // A consumer's failure is its own; the bus keeps delivering to the others.
        }
      });
    }
  }

  clear(): void {
    this.handlers.clear();
  }
}
