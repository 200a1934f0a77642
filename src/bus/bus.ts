import { BATCH_TOPIC, type Topic, type TopicMessage, type TopicPayloads } from '../domain/topic.js';

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

/**
 * Several messages handed over as one (one transaction's: its outbox row): message i is delivered
 * with the id `<id>.<i>`, exactly as if it had been published alone with that id. One publish, one
 * acknowledgement and one delivery to each replica for all of them (docs/replicas.md).
 */
export interface BusBatch {
  id: string;
  messages: TopicMessage[];
}

/** The messages a batch stands for, each with its own id. */
export function batchMessages(batch: BusBatch): BusMessage[] {
  return batch.messages.map((m, i) => ({ id: memberId(batch.id, i), topic: m.topic, payload: m.payload }) as BusMessage);
}

/** The id a batch's message i is delivered with, by every bus and from either format: its place is its id. */
function memberId(batchId: string, i: number): string {
  return `${batchId}.${i}`;
}

/**
 * A message as it travels between replicas, parsed: one message, or (topic BATCH_TOPIC, a replica of
 * this version's or an older replica's relay forwarding a batch row as it reads it) a batch. Anything
 * else (not an object, no string id or topic, a batch whose payload is not a list) answers [].
 */
export function wireMessages(parsed: unknown): BusMessage[] {
  if (typeof parsed !== 'object' || parsed === null) return [];
  const { id, topic, payload } = parsed as Record<string, unknown>;
  if (typeof id !== 'string' || typeof topic !== 'string') return [];
  if (topic !== BATCH_TOPIC) return [parsed as BusMessage];
  if (!Array.isArray(payload)) return [];
  // A malformed member is dropped without moving the others' ids (their place is their id).
  const out: BusMessage[] = [];
  payload.forEach((m: unknown, i) => {
    const member = m as Partial<TopicMessage> | null;
    if (typeof member?.topic === 'string') out.push({ id: memberId(id, i), topic: member.topic, payload: member.payload } as BusMessage);
  });
  return out;
}

export interface Bus {
  publish(msg: BusMessage): Promise<void>;
  /** Publishes a batch's messages (BusBatch), in one hand-off where the transport can. */
  publishBatch(batch: BusBatch): Promise<void>;
  /** Returns an unsubscribe function. */
  subscribe<T extends Topic>(topic: T, handler: BusHandler<T>): () => void;
  close(): Promise<void>;
}
