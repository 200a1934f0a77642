/**
 * The message bus carries hints, never truth: "pool cpu has ready stages", "machine m has news".
 * Every consumer re-reads the database when woken, so a message seen twice, late, out of order
 * or never costs at most a delay (a periodic pass catches up), never a wrong state.
 */
export interface BusMessage {
  /** Unique per message (the outbox row id), so consumers can drop repeats if they care. */
  id: string;
  topic: string;
  payload: Record<string, unknown>;
}

export type BusHandler = (msg: BusMessage) => void;

export interface Bus {
  publish(msg: BusMessage): Promise<void>;
  /** Returns an unsubscribe function. */
  subscribe(topic: string, handler: BusHandler): () => void;
  close(): Promise<void>;
}

/** Topics. `noun:verb`, as the events are. */
export const Topic = {
  poolReady: 'pool:ready',
  capacityFreed: 'capacity:freed',
  machineWake: 'machine:wake',
  /** A transaction wrote events (sent from memory, never stored): live event streams read on. */
  eventsWritten: 'events:written',
  /** Pieces of an attempt's log were stored (`{ attemptId }`; sent from memory by the log route, never
   *  stored): streams following that log read on (GET …/logs?follow=1). */
  logsWritten: 'logs:written',
} as const;
