import type { Topic } from '../domain/topic.js';
import type { BusHandler, BusMessage } from './bus.js';

/** Who listens to what, for a bus's own process: the part every Bus shares. */
export class Subscribers {
  private handlers = new Map<Topic, Set<BusHandler>>();

  add<T extends Topic>(topic: T, handler: BusHandler<T>): () => void {
    let hs = this.handlers.get(topic);
    if (!hs) this.handlers.set(topic, (hs = new Set()));
    // Kept under its topic, so it is only ever handed messages of that topic (deliver): the
    // cast only forgets which topic, for the one map that holds them all.
    const h = handler as BusHandler;
    hs.add(h);
    return () => hs.delete(h);
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
