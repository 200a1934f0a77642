import { randomUUID } from 'node:crypto';
import type { Bus } from '../bus/bus.js';
import type { Clock } from '../domain/clock.js';
import { topicMessage } from '../domain/topic.js';
import type { OutboxMessage } from '../store/records.js';
import type { Store } from '../store/store.js';

/**
 * The outbox's way to the bus. Messages a transaction wrote are published as soon as it commits
 * (`published`, from the store's onOutbox), and marked published later, many in one write by the
 * relay pass: a commit per message would cost more than the work it announces. The pass also
 * publishes rows nobody published (the process died between a commit and its publish), oldest
 * first, once they are `graceMs` old: younger ones are the rows another replica (or this one) has
 * published and not marked yet, its next pass marks them, and every replica's pass sent each of
 * them again (two replicas: every message published twice; docs/replicas.md). A crash before the
 * mark publishes some again: consumers are idempotent.
 */
export class OutboxRelay {
  private sent: number[] = [];
  /** Ids of messages kept in memory count from 1 in every process; this makes them unique across
   *  replicas and restarts, since NATS drops a repeated id within its duplicate window. */
  private readonly instance = randomUUID();

  constructor(
    private readonly store: Store,
    private readonly bus: Bus,
    private readonly clock: Clock,
    private readonly onError: (err: unknown) => void = () => {},
    /** How old a row nobody marked must be before this pass sends it (0: at once). */
    private readonly graceMs = 0,
  ) {}

  /** Publishes what a transaction just committed. */
  published(messages: OutboxMessage[]): void {
    for (const m of messages) {
      if (m.stored === false) {
        // No row to mark or to send again: a message of this process's own (ids apart from rows').
        this.bus.publish({ id: `mem:${this.instance}:${m.id}`, ...topicMessage(m) }).catch(this.onError);
        continue;
      }
      // Marked only once the bus took it: a failed publish is left for the relay's pass to retry.
      this.bus.publish({ id: String(m.id), ...topicMessage(m) }).then(() => void this.sent.push(m.id), this.onError);
    }
  }

  /** How many were sent and not yet marked. */
  get unmarked(): number {
    return this.sent.length;
  }

  /** Marks what was sent, then publishes and marks what was not. Returns how many it published. */
  async pass(batch = 500): Promise<number> {
    const sent = this.sent;
    this.sent = [];
    for (let i = 0; i < sent.length; i += batch) {
      await this.store.outboxMarkPublished({ ids: sent.slice(i, i + batch), now: this.clock.now() });
    }
    let total = 0;
    for (;;) {
      const msgs = await this.store.outboxPending({ limit: batch, createdBefore: this.clock.now() - this.graceMs + 1 });
      if (msgs.length === 0) return total;
      for (const m of msgs) await this.bus.publish({ id: String(m.id), ...topicMessage(m) });
      await this.store.outboxMarkPublished({ ids: msgs.map((m) => m.id), now: this.clock.now() });
      total += msgs.length;
      if (msgs.length < batch) return total;
    }
  }
}
