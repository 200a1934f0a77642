import type { Bus } from '../bus/bus.js';
import type { Clock } from '../domain/clock.js';
import type { Store } from '../store/store.js';

/**
 * Publishes outbox rows to the bus, oldest first, then marks them published. A crash between
 * the publish and the mark publishes them again on the next pass: consumers are idempotent.
 */
export async function relayOutbox(store: Store, bus: Bus, clock: Clock, batch = 500): Promise<number> {
  let total = 0;
  for (;;) {
    const msgs = await store.outboxPending({ limit: batch });
    if (msgs.length === 0) return total;
    for (const m of msgs) await bus.publish({ id: String(m.id), topic: m.topic, payload: m.payload });
    await store.outboxMarkPublished({ ids: msgs.map((m) => m.id), now: clock.now() });
    total += msgs.length;
    if (msgs.length < batch) return total;
  }
}
