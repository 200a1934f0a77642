import { randomUUID } from 'node:crypto';
import { batchMessages, type Bus, type BusBatch, type BusMessage } from '../bus/bus.js';
import type { Clock } from '../domain/clock.js';
import { topicMessage, type TopicMessage } from '../domain/topic.js';
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

  /**
   * Publishes what a transaction just committed: each outbox row as one bus message (a row holding
   * several as a batch, BusBatch), with the messages kept in memory (the events' wake-up) in the
   * first row's batch, so that a report's messages cost one publish and one acknowledgement.
   * `handled` is told the bus id of each message marked `handled` (a placement hint a pass before
   * the commit handled), before the bus has it: this process's own subscribers are handed it from
   * the publish, and the scheduler loop's looks the id up (docs/scheduling.md, "Which hints wake
   * the loop").
   */
  published(messages: OutboxMessage[], handled: (busId: string, since: number) => void = () => {}): void {
    const rows = byRow(messages.filter((m) => m.stored !== false));
    const loose = messages.filter((m) => m.stored === false);
    const first = rows[0];
    if (!first) {
      // No row to mark or to send again: messages of this process's own (ids apart from rows').
      for (const m of messages) {
        const id = `mem:${this.instance}:${m.id}`;
        if (m.handled) handled(id, m.handledSince ?? 0);
        this.bus.publish({ id, ...topicMessage(m) }).catch(this.onError);
      }
      return;
    }
    for (const row of rows) {
      const extra = row === first ? loose : [];
      const out = rowOnBus(
        row,
        extra.map((m) => topicMessage(m)),
      );
      // The bus's ids in the order of the row's messages, then `extra`'s.
      const ids = 'messages' in out ? batchMessages(out).map((m) => m.id) : [out.id];
      [...row, ...extra].forEach((m, i) => {
        if (m.handled) handled(ids[i]!, m.handledSince ?? 0);
      });
      // Marked only once the bus took it: a failed publish is left for the relay's pass to retry.
      this.publishRow(out).then(() => void this.sent.push(row[0]!.id), this.onError);
    }
  }

  private publishRow(out: BusMessage | BusBatch): Promise<void> {
    return 'messages' in out ? this.bus.publishBatch(out) : this.bus.publish(out);
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
      const rows = byRow(msgs);
      if (rows.length === 0) return total;
      // Together: their acknowledgements come back on one connection, not one round trip each.
      await Promise.all(rows.map((row) => this.publishRow(rowOnBus(row, []))));
      await this.store.outboxMarkPublished({ ids: rows.map((row) => row[0]!.id), now: this.clock.now() });
      total += msgs.length;
      if (rows.length < batch) return total;
    }
  }
}

/**
 * One row's messages, with `extra` after them, as they go to the bus: as the row was before
 * batches (one message, its id the row's) where it holds one and nothing rides with it, else as a
 * batch of the row's id. Its members are then `<row>.<i>`: the row's own in their order, `extra`
 * after them, so a repeat of the row (the pass's) delivers nothing new and NATS stores it once (the
 * same id).
 */
function rowOnBus(row: OutboxMessage[], extra: TopicMessage[]): BusMessage | BusBatch {
  const head = row[0]!;
  if (row.length === 1 && head.part === undefined && extra.length === 0) return { id: String(head.id), ...topicMessage(head) };
  return { id: String(head.id), messages: [...row.map((m) => topicMessage(m)), ...extra] };
}

/** Messages grouped by their outbox row, in order (a row's messages come together, in its order). */
function byRow(messages: OutboxMessage[]): OutboxMessage[][] {
  const rows: OutboxMessage[][] = [];
  for (const m of messages) {
    const last = rows[rows.length - 1];
    if (last && last[0]!.id === m.id) last.push(m);
    else rows.push([m]);
  }
  return rows;
}
