import { describe, expect, it } from 'vitest';
import { ChaosBus, parseChaosSettings } from './chaos-bus.js';
import { MemoryBus } from './memory-bus.js';

async function run(seed: number) {
  const bus = new ChaosBus(new MemoryBus({ dedupe: false }), { seed, drop: 0.2, duplicate: 0.3, delayMs: [0, 20] });
  const got: string[] = [];
  bus.subscribe('pool:ready', (m) => got.push(m.id));
  for (let i = 0; i < 200; i++) await bus.publish({ id: String(i), topic: 'pool:ready', payload: { pool: 'cpu' } });
  await new Promise((r) => setTimeout(r, 60));
  await bus.close();
  return { got, stats: bus.stats };
}

describe('ChaosBus', () => {
  it('drops, duplicates and reorders, the same way for the same seed', async () => {
    const a = await run(7);
    expect(a.stats.dropped).toBeGreaterThan(10);
    expect(a.stats.duplicated).toBeGreaterThan(10);
    expect(a.got.length).toBe(200 - a.stats.dropped + a.stats.duplicated);
    const inOrder = [...a.got].sort((x, y) => Number(x) - Number(y));
    expect(a.got).not.toEqual(inOrder);
    const b = await run(7);
    expect(b.stats).toEqual(a.stats);
    expect(new Set(b.got)).toEqual(new Set(a.got));
  });

  it('parses settings and refuses unknown ones', () => {
    expect(parseChaosSettings('seed=3,drop=0.5,delay=10-200')).toEqual({ seed: 3, drop: 0.5, duplicate: 0, delayMs: [10, 200] });
    expect(() => parseChaosSettings('seed=1,dorp=0.1')).toThrow(/unknown setting "dorp"/);
  });
});
