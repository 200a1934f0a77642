import { batchMessages, type Bus, type BusBatch, type BusHandler, type BusMessage } from './bus.js';
import { seededRandom } from '../lib/seeded-random.js';
import type { Topic } from '../domain/topic.js';

export interface ChaosSettings {
  seed: number;
  /** Probability a message is never delivered. */
  drop: number;
  /** Probability a message is delivered twice. */
  duplicate: number;
  /** Each delivery waits a uniform random time in [min, max] ms; different waits reorder. */
  delayMs: [number, number];
}

/**
 * A bus that misbehaves on purpose, for tests: it drops, duplicates, delays and (through
 * unequal delays) reorders messages, driven by a seeded PRNG. Gantry must reach the same final
 * states through it as through a faithful bus, only later: messages are hints.
 */
export class ChaosBus implements Bus {
  private readonly random: () => number;
  readonly stats = { published: 0, dropped: 0, duplicated: 0 };
  private timers = new Set<NodeJS.Timeout>();

  constructor(
    private readonly inner: Bus,
    private readonly s: ChaosSettings,
  ) {
    this.random = seededRandom(s.seed);
  }

  async publish(msg: BusMessage): Promise<void> {
    this.stats.published++;
    if (this.random() < this.s.drop) {
      this.stats.dropped++;
      return;
    }
    const copies = this.random() < this.s.duplicate ? 2 : 1;
    if (copies === 2) this.stats.duplicated++;
    for (let i = 0; i < copies; i++) {
      const [lo, hi] = this.s.delayMs;
      const t = setTimeout(
        () => {
          this.timers.delete(t);
          void this.inner.publish(msg);
        },
        lo + this.random() * (hi - lo),
      );
      this.timers.add(t);
    }
  }

  /** Each of the batch's messages meets the chaos alone, as if published one by one. */
  async publishBatch(batch: BusBatch): Promise<void> {
    for (const m of batchMessages(batch)) await this.publish(m);
  }

  subscribe<T extends Topic>(topic: T, handler: BusHandler<T>): () => void {
    return this.inner.subscribe(topic, handler);
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    await this.inner.close();
  }
}

/** `seed=7,drop=0.3,duplicate=0.3,delay=0-500` → settings; missing keys are 0. */
export function parseChaosSettings(text: string): ChaosSettings {
  const kv = new Map(
    text
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean)
      .map((p) => p.split('=') as [string, string]),
  );
  const known = new Set(['seed', 'drop', 'duplicate', 'delay']);
  for (const k of kv.keys()) if (!known.has(k)) throw new Error(`bus chaos: unknown setting "${k}" (use seed, drop, duplicate, delay)`);
  const num = (k: string) => {
    const v = Number(kv.get(k) ?? 0);
    if (!Number.isFinite(v) || v < 0) throw new Error(`bus chaos: ${k} must be a non-negative number`);
    return v;
  };
  const [lo, hi] = (kv.get('delay') ?? '0-0').split('-').map(Number) as [number, number];
  if (!(lo >= 0 && hi >= lo)) throw new Error('bus chaos: delay must look like 0-500');
  return { seed: num('seed'), drop: num('drop'), duplicate: num('duplicate'), delayMs: [lo, hi] };
}
