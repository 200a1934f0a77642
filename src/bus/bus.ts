import type { Topic, TopicPayloads } from '../domain/topic.js';

/**
 * The message bus carries hints, never truth: "pool cpu has ready stages", "machine m has news".
 * Every consumer re-reads the database when woken, so a message seen twice, late, out of order
 * or never costs at most a delay (a periodic pass catches up), never a wrong state. Topics and
 * their payloads are declared once, in domain/topic.ts, for the store that publishes them too.
 */
export type BusMessage<T extends Topic = Topic> = T extends Topic
  ? {
      /** Unique per message (the outbox row id), so consumers can drop repeats if they care. */
      id: string;
      topic: T;
      payload: TopicPayloads[T];
    }
  : never;

export type BusHandler<T extends Topic = Topic> = (msg: BusMessage<T>) => void;

export interface Bus {
  publish(msg: BusMessage): Promise<void>;
  /** Returns an unsubscribe function. */
  subscribe<T extends Topic>(topic: T, handler: BusHandler<T>): () => void;
  close(): Promise<void>;
}
