import { DeliverPolicy, DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType, type JetStreamClient } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { batchMessages, wireMessages, type Bus, type BusBatch, type BusHandler, type BusMessage } from './bus.js';
import { RecentIds } from './recent-ids.js';
import { Subscribers } from './subscribers.js';
import { BATCH_TOPIC, type Topic } from '../domain/topic.js';
import { serverList } from '../lib/server-list.js';
import { sleep } from '../lib/sleep.js';

/** One stream for every installation on this NATS; each installation's messages under its own subjects. */
const STREAM = 'GANTRY';
const SUBJECTS = 'gantry.>';
/** Repeats of a message id within this window are stored once (JetStream's de-duplication). */
const DUPLICATE_WINDOW_NS = 120 * 1e9;

export interface NatsBusOptions {
  /** The installation (Store.installationId): its messages go to `gantry.<installation>.…`. */
  installation: string;
  onError?: (err: unknown) => void;
  /** Told when the bus connects, loses NATS, and gets it back. */
  onState?: (state: 'connected' | 'disconnected' | 'reconnected') => void;
}

/**
 * The bus between replicas: NATS JetStream (docs/replicas.md). A message is published to the
 * stream with its id (the outbox row's) as `Nats-Msg-Id`, so a relay's repeat is stored once;
 * every replica reads the stream's new messages through an ordered consumer of its own, so each
 * sees every message. Messages are hints (bus.ts): when NATS is away, publish fails (the outbox
 * row stays unpublished and the relay tries again), nothing is delivered, and the loops' periodic
 * passes carry the work; the connection comes back by itself, and so does the consumer.
 */
export class NatsBus implements Bus {
  private subscribers = new Subscribers();
  private seen = new RecentIds();
  /** The Nats-Msg-Id of what this replica sent lately: NATS brings each back, already delivered here. */
  private mine = new RecentIds();
  private nc: NatsConnection | null = null;
  private js: JetStreamClient | null = null;
  private closed = false;
  private readonly prefix: string;
  private readonly running: Promise<void>;
  private wake: (() => void) | null = null;

  constructor(
    private readonly servers: string[],
    private readonly opts: NatsBusOptions,
  ) {
    if (!/^[A-Za-z0-9_-]+$/.test(opts.installation)) throw new Error(`installation id "${opts.installation}" cannot be a NATS subject token`);
    this.prefix = `gantry.${opts.installation}.`;
    this.running = this.run();
  }

  /** `nats://a:4222,nats://b:4222` → the list of servers, read as every other list of servers is. */
  static servers(url: string): string[] {
    return serverList(url);
  }

  /** Resolves once connected and consuming (for tests and for a start that wants to wait). */
  async ready(timeoutMs = 10_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (!this.consuming) {
      if (Date.now() > until) throw new Error(`NATS at ${this.servers.join(',')}: not connected after ${timeoutMs} ms`);
      await sleep(20);
    }
  }

  private consuming = false;
  /** Since the last error said, until consuming again: later errors of the same outage are not said. */
  private failing = false;
  /** The consumer's message stream now; stopped to make it start again (after a reconnect). */
  private messages: { stop(): void } | null = null;

  async publish(msg: BusMessage): Promise<void> {
    this.deliverHere([msg]);
    await this.send(msg.id, msg.topic, JSON.stringify(msg));
  }

  /**
   * One JetStream message for the whole batch, as an outbox row holding several is stored:
   * `{id, topic: "batch", payload: [{topic, payload}, …]}` under `gantry.<installation>.batch`,
   * with the batch's id as `Nats-Msg-Id` (a relay's repeat of the row is stored once).
   */
  async publishBatch(batch: BusBatch): Promise<void> {
    this.deliverHere(batchMessages(batch));
    await this.send(batch.id, BATCH_TOPIC, JSON.stringify({ id: batch.id, topic: BATCH_TOPIC, payload: batch.messages }));
  }

  /**
   * This replica's own messages reach its own subscribers at once, as one replica's in-process bus
   * hands them (memory-bus.ts), not after a trip through NATS and back: the leader's report that
   * readied a stage kicks its own scheduler with no publish, store and delivery in between, and
   * does so with NATS away too. Each is marked seen, so the copy NATS brings back is dropped
   * (unread: `dispatch` is not even handed it, by its Nats-Msg-Id); the other replicas get theirs
   * from NATS as before.
   */
  private deliverHere(msgs: BusMessage[]): void {
    for (const m of msgs) if (this.seen.first(m.id)) this.subscribers.deliver(m, queueMicrotask);
  }

  private async send(id: string, topic: string, body: string): Promise<void> {
    this.mine.first(`${this.opts.installation}:${id}`);
    const js = this.js;
    if (!js || this.nc?.isClosed()) throw new Error(`NATS at ${this.servers.join(',')} is not connected: message ${id} left for the relay to send again`);
    await js.publish(this.prefix + topic.replaceAll(':', '.'), body, { msgID: `${this.opts.installation}:${id}`, timeout: 2000 });
  }

  subscribe<T extends Topic>(topic: T, handler: BusHandler<T>): () => void {
    return this.subscribers.add(topic, handler);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.subscribers.clear();
    this.wake?.();
    await this.nc?.close().catch(() => {});
    await this.running;
  }

  /** Connects, then consumes; whenever the consumer ends (NATS restarted without the stream, say), starts it again. */
  private async run(): Promise<void> {
    while (!this.closed) {
      try {
        if (!this.nc || this.nc.isClosed()) {
          // noAsyncTraces: no stack captured at every publish for an error that almost never
          // comes (each publish is a request: its RequestError was 0.6 % of the leader's CPU).
          this.nc = await connect({
            servers: this.servers,
            name: `gantry ${this.opts.installation}`,
            maxReconnectAttempts: -1,
            reconnectTimeWait: 500,
            noAsyncTraces: true,
          });
          this.js = jetstream(this.nc);
          this.opts.onState?.('connected');
          void this.watchStatus(this.nc);
        }
        await this.ensureStream(this.nc);
        const consumer = await this.js!.consumers.get(STREAM, { filter_subjects: `${this.prefix}>`, deliver_policy: DeliverPolicy.New });
        const messages = await consumer.consume();
        this.messages = messages;
        this.consuming = true;
        if (this.failing) {
          this.failing = false;
          this.opts.onState?.('reconnected');
        }
        for await (const m of messages) {
          if (this.closed) break;
          const msgId = m.headers?.get('Nats-Msg-Id');
          if (msgId && this.mine.has(msgId)) continue;
          this.dispatch(m.string());
        }
      } catch (err) {
        // Said once per outage (a try every 500 ms would say it twice a second), and its end once.
        if (!this.closed && !this.failing) {
          this.failing = true;
          this.opts.onError?.(err);
        }
      }
      this.consuming = false;
      if (!this.closed) await new Promise<void>((r) => ((this.wake = r), setTimeout(r, 500)));
    }
  }

  private async watchStatus(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect') this.opts.onState?.('disconnected');
      if (s.type === 'reconnect') {
        this.opts.onState?.('reconnected');
        // A NATS that restarted has lost the in-memory stream and this replica's consumer: make
        // the stream again and start a new consumer (run() does, once this one is stopped).
        await this.ensureStream(nc).catch((err) => this.opts.onError?.(err));
        this.messages?.stop();
      }
    }
  }

  private async ensureStream(nc: NatsConnection): Promise<void> {
    const jsm = await jetstreamManager(nc);
    try {
      await jsm.streams.info(STREAM);
    } catch {
      try {
        await jsm.streams.add({
          name: STREAM,
          subjects: [SUBJECTS],
          // Hints only: kept in memory, briefly, a bounded number.
          storage: StorageType.Memory,
          retention: RetentionPolicy.Limits,
          max_age: 10 * 60 * 1e9,
          max_msgs: 100_000,
          discard: DiscardPolicy.Old,
          duplicate_window: DUPLICATE_WINDOW_NS,
        });
      } catch (err) {
        // Another replica made it first.
        await jsm.streams.info(STREAM).catch(() => {
          throw err;
        });
      }
    }
  }

  /** A message as published, or a batch of them (either format, from replicas of either version): each delivered once by its id. */
  private dispatch(text: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return;
    }
    for (const msg of wireMessages(parsed)) if (this.seen.first(msg.id)) this.subscribers.deliver(msg);
  }
}
