import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Bus } from '../src/bus/bus.js';
import { Topic } from '../src/domain/topic.js';
import type { TxContext } from '../src/store/kysely/tx-context.js';
import { REPO } from './support/gantry-process.js';

/**
 * The bus's topics (src/domain/topic.ts) against the code: a topic published that nothing
 * subscribes to is work for no reader (an outbox row, a NATS message) or, more likely, a wake-up
 * its consumer listens for under another topic and never gets, hidden by the periodic passes.
 * The types make an unknown topic fail to compile; this catches a known one nobody hears.
 * Read from the source, as the layering test reads imports: a publish is `.publish('x:y'` or
 * `.publish(Topic.k`, or a message written as `topic: 'x:y'` / `topic: Topic.k`; a subscription
 * is `.subscribe('x:y'` or `.subscribe(Topic.k`. Tests (*.test.ts) and the bus's conformance
 * suite publish to exercise the bus and are not scanned.
 */
const SRC = join(REPO, 'src');
const NAMES: Record<string, string> = Topic;

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return sources(p);
    return /\.tsx?$/.test(p) && !/\.test\.tsx?$/.test(p) && !p.endsWith('bus-conformance.ts') ? [p] : [];
  });
}

/** Topic → the files that name it in that position. */
function found(patterns: RegExp[]): Map<string, Set<string>> {
  const at = new Map<string, Set<string>>();
  for (const file of sources(SRC)) {
    const text = readFileSync(file, 'utf8');
    for (const re of patterns) {
      for (const m of text.matchAll(re)) {
        const topic = m[1] ?? NAMES[m[2]!] ?? `Topic.${m[2]}`;
        if (!at.has(topic)) at.set(topic, new Set());
        at.get(topic)!.add(relative(SRC, file));
      }
    }
  }
  return at;
}

const TOPIC = String.raw`(?:'([^']+)'|Topic\.(\w+))`;
const published = found([new RegExp(String.raw`\.publish(?:<\w+>)?\(\s*${TOPIC}`, 'g'), new RegExp(String.raw`\btopic:\s*${TOPIC}`, 'g')]);
const subscribed = found([new RegExp(String.raw`\.subscribe(?:<\w+>)?\(\s*${TOPIC}`, 'g')]);

/** Never run: the typecheck (npm test's, tsconfig.check.json) fails if any line below compiles. */
function mistakesThatDoNotCompile(tx: TxContext, bus: Bus): void {
  // @ts-expect-error a topic nobody declared (a typo)
  void tx.publish('pool:redy', { pool: 'cpu' });
  // @ts-expect-error pool:ready carries its pool
  void tx.publish('pool:ready', { machineId: 'm' });
  // @ts-expect-error a topic nobody declared
  bus.subscribe('job:changed', () => {});
  // @ts-expect-error machine:wake carries a machineId, not a pool
  bus.subscribe(Topic.machineWake, (m) => m.payload.pool);
  // @ts-expect-error a message's payload is its topic's
  void bus.publish({ id: '1', topic: Topic.logsWritten, payload: { pool: 'cpu' } });
}

describe('bus topics', () => {
  it('are typed: an unknown topic or a wrong payload does not compile (see the typecheck)', () => {
    expect(mistakesThatDoNotCompile).toBeTypeOf('function');
  });

  it('finds what it checks (the scan itself works)', () => {
    expect([...(published.get(Topic.poolReady) ?? [])]).toContain('store/kysely/submit-verbs.ts');
    expect([...(published.get(Topic.eventsWritten) ?? [])]).toContain('store/kysely/tx-context.ts');
    expect([...(published.get(Topic.logsWritten) ?? [])]).toContain('api/agent-routes.ts');
    expect([...(subscribed.get(Topic.machineWake) ?? [])]).toContain('api/long-poll.ts');
  });

  it('every topic published has a subscriber', () => {
    const unheard = [...published.keys()].filter((t) => !subscribed.has(t)).map((t) => `${t} (published in ${[...published.get(t)!].join(', ')})`);
    expect(unheard).toEqual([]);
  });

  it('every topic declared is published, and only declared topics are used', () => {
    const declared = new Set(Object.values(Topic) as string[]);
    expect([...declared].filter((t) => !published.has(t))).toEqual([]);
    expect([...published.keys(), ...subscribed.keys()].filter((t) => !declared.has(t))).toEqual([]);
  });
});
