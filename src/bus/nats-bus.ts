import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { batchMessages, wireMessages, type Bus, type BusBatch, type BusHandler, type BusMessage } from './bus.js';
import { RecentIds } from './recent-ids.js';
import { Subscribers } from './subscribers.js';
import { BATCH_TOPIC, type Topic } from '../domain/topic.js';
import { serverList } from '../lib/server-list.js';
import { sleep } from '../lib/sleep.js';

/** How long a publish waits for NATS to say it has the message before it is left to the relay. */
const PUBLISH_TIMEOUT_MS = 2000;

export interface NatsBusOptions {
  /** The installation (Store.installationId): its messages go to `gantry-bus.<installation>.…`. */
  installation: string;
  onError?: (err: unknown) => void;
  /** Told when the bus connects, loses NATS, and gets it back. */
  onState?: (state: 'connected' | 'disconnected' | 'reconnected') => void;
}

/**
 * The bus between replicas: core NATS on a connection NATS never echoes to (docs/replicas.md,
 * "What goes over NATS"). A message is published on `gantry-bus.<installation>.<topic>` and every
 * replica subscribes to `gantry-bus.<installation>.>`, so each is sent the others' messages and
 * not its own, which it hands its own subscribers at the publish. Messages are hints (bus.ts):
 * when NATS is away, publish fails (the outbox row stays unpublished and the relay tries again),
 * nothing is delivered, and the loops' periodic passes carry the work; the connection and its
 * subscriptions come back by themselves.
 */
export class NatsBus implements Bus {
  private subscribers = new Subscribers();
  private seen = new RecentIds();
  private nc: NatsConnection | null = null;
  /** Connected now (not between a disconnect and its reconnect): a publish while not is refused at once. */
  private up = false;
  private closed = false;
  private readonly prefix: string;
  private readonly running: Promise<void>;
  private wake: (() => void) | null = null;

  constructor(
    private readonly servers: string[],
    private readonly opts: NatsBusOptions,
  ) {
    if (!/^[A-Za-z0-9_-]+$/.test(opts.installation)) throw new Error(`installation id "${opts.installation}" cannot be a NATS subject token`);
    this.prefix = `gantry-bus.${opts.installation}.`;
    this.running = this.run();
  }

  /** `nats://a:4222,nats://b:4222` → the list of servers, read as every other list of servers is. */
  static servers(url: string): string[] {
    return serverList(url);
  }

  /** Resolves once connected and subscribed (for tests and for a start that wants to wait). */
  async ready(timeoutMs = 10_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (!this.consuming) {
      if (Date.now() > until) throw new Error(`NATS at ${this.servers.join(',')}: not connected after ${timeoutMs} ms`);
      await sleep(20);
    }
  }

  private consuming = false;
  /** Since the last error said, until connected again: later errors of the same outage are not said. */
  private failing = false;

  async publish(msg: BusMessage): Promise<void> {
    this.deliverHere([msg]);
    await this.send(msg.id, msg.topic, JSON.stringify(msg));
  }

  /**
   * One NATS message for the whole batch, as an outbox row holding several is stored:
   * `{id, topic: "batch", payload: [{topic, payload}, …]}` under `gantry-bus.<installation>.batch`.
   */
  async publishBatch(batch: BusBatch): Promise<void> {
    this.deliverHere(batchMessages(batch));
    await this.send(batch.id, BATCH_TOPIC, JSON.stringify({ id: batch.id, topic: BATCH_TOPIC, payload: batch.messages }));
  }

  /**
   * This replica's own messages reach its own subscribers at once, as one replica's in-process bus
   * hands them (memory-bus.ts): NATS does not echo them back (the connection says `no_echo`), and
   * the leader's report that readied a stage kicks its own scheduler with NATS away too. Each is
   * marked seen, so a relay's second send of the row delivers nothing new here.
   */
  private deliverHere(msgs: BusMessage[]): void {
    for (const m of msgs) if (this.seen.first(m.id)) this.subscribers.deliver(m, queueMicrotask);
  }

  /**
   * Publishes, then flushes: the server answers the flush's PING once it has handled all that came
   * before it, so the message went to every subscriber connected then (what JetStream's
   * acknowledgement said before, without storing it). Refused at once while NATS is away, rather
   * than buffered for a reconnect: the outbox row is the buffer, and the relay sends it again.
   */
  private async send(id: string, topic: string, body: string): Promise<void> {
    const nc = this.nc;
    if (!nc || !this.up || nc.isClosed()) throw new Error(`NATS at ${this.servers.join(',')} is not connected: message ${id} left for the relay to send again`);
    nc.publish(this.prefix + topic.replaceAll(':', '.'), body);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        nc.flush(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`NATS at ${this.servers.join(',')}: message ${id} not confirmed within ${PUBLISH_TIMEOUT_MS} ms`)),
            PUBLISH_TIMEOUT_MS,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
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

  /** Connects and subscribes; the client reconnects and subscribes again by itself, so this loops only until the first connect. */
  private async run(): Promise<void> {
    while (!this.closed) {
      try {
        // noEcho: this connection is not sent what it publishes (its own messages, delivered at
        // the publish). noAsyncTraces: no stack captured at every flush for an error that almost
        // never comes.
        const nc = await connect({
          servers: this.servers,
          name: `gantry ${this.opts.installation}`,
          maxReconnectAttempts: -1,
          reconnectTimeWait: 500,
          noEcho: true,
          noAsyncTraces: true,
        });
        this.nc = nc;
        void this.watchStatus(nc);
        const onMessage = (err: Error | null, m: Msg) => {
          if (!err) this.dispatch(m.string());
        };
        nc.subscribe(`${this.prefix}>`, { callback: onMessage });
        // Where replicas of the JetStream version publish (docs/replicas.md, "Replicas of two versions together").
        nc.subscribe(`gantry.${this.opts.installation}.>`, { callback: onMessage });
        await nc.flush();
        this.up = true;
        this.consuming = true;
        this.opts.onState?.('connected');
        this.failing = false;
        await nc.closed();
        if (this.closed) return;
      } catch (err) {
        // Said once per outage (a try every 500 ms would say it twice a second).
        if (!this.closed && !this.failing) {
          this.failing = true;
          this.opts.onError?.(err);
        }
      }
      this.up = false;
      this.consuming = false;
      if (!this.closed) await new Promise<void>((r) => ((this.wake = r), setTimeout(r, 500)));
    }
  }

  private async watchStatus(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type === 'disconnect') {
        this.up = false;
        this.opts.onState?.('disconnected');
      }
      if (s.type === 'reconnect') {
        this.up = true;
        this.opts.onState?.('reconnected');
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
