/**
 * The bus's topics, `noun:verb` as the events are, declared once for the store (which publishes
 * them through the outbox) and the bus and its consumers (which subscribe): a topic is one of
 * these or does not compile, so a typo cannot lose a wake-up. Messages are hints (bus/bus.ts).
 * test/topics.test.ts fails when a topic is published that nothing subscribes to.
 */
export const Topic = {
  /** A pool has stages that became ready: a scheduler pass may place them. */
  poolReady: 'pool:ready',
  /** Room was freed on a machine (or a team's quota changed): a pass may place what waited. */
  capacityFreed: 'capacity:freed',
  /** A machine has news (an assignment, a kill): its agent's held heartbeat is answered now. */
  machineWake: 'machine:wake',
  /** A transaction wrote events (sent from memory, never stored): live event streams read on. */
  eventsWritten: 'events:written',
  /** Pieces of an attempt's log were stored (sent from memory by the log route, never stored):
   *  streams following that log read on (GET …/logs?follow=1). */
  logsWritten: 'logs:written',
} as const;

export type Topic = (typeof Topic)[keyof typeof Topic];

/** What a message of each topic carries. */
export interface TopicPayloads {
  'pool:ready': { pool: string };
  'capacity:freed': { machineId: string } | { team: string };
  'machine:wake': { machineId: string };
  'events:written': Record<string, never>;
  'logs:written': { attemptId: string };
}

/**
 * Not a topic: what an outbox row or a bus message holding several messages (one transaction's)
 * says in place of one, its payload the list of them (TopicMessage[]). Its message i is delivered
 * with the id `<row id>.<i>` (bus.ts batchMessages; docs/replicas.md, "The outbox and the relay").
 */
export const BATCH_TOPIC = 'batch';

/** A topic with its payload: what the store's outbox holds and the bus carries (with an id). */
export type TopicMessage<T extends Topic = Topic> = T extends Topic ? { topic: T; payload: TopicPayloads[T] } : never;

/**
 * Only the topic and payload of `m` (an outbox row or a bus message carries more). TypeScript
 * loses that the two belong together once they are taken apart, hence the one cast.
 */
export function topicMessage(m: TopicMessage): TopicMessage {
  return { topic: m.topic, payload: m.payload } as TopicMessage;
}
