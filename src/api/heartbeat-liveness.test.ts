import { describe, expect, it } from 'vitest';
import type { MachineSeen, Store } from '../store/store.js';
import { HeartbeatLiveness } from './heartbeat-liveness.js';

/** A store whose machinesSeen waits until the test lets it return or throw. */
function gatedStore() {
  let release!: (err?: Error) => void;
  const written: MachineSeen[][] = [];
  const store = {
    machinesSeen: (p: { seen: MachineSeen[] }) =>
      new Promise<number>((resolve, reject) => {
        release = (err) => (err ? reject(err) : (written.push(p.seen), resolve(p.seen.length)));
      }),
  } as unknown as Store;
  return { store, written, release: (err?: Error) => release(err) };
}

describe('HeartbeatLiveness.heardAt', () => {
  it('answers for an arrival recorded, and while its flush is under way; not once it is written', async () => {
    const l = new HeartbeatLiveness();
    const g = gatedStore();
    l.record('m1', 1000);
    expect(l.heardAt('m1')).toBe(1000);
    expect(l.heardAt('m2')).toBeUndefined();
    const flushing = l.flush(g.store, 1100);
    // Neither in the map of the next flush nor committed: still heard.
    expect(l.heardAt('m1')).toBe(1000);
    l.record('m1', 1200);
    expect(l.heardAt('m1')).toBe(1200);
    g.release();
    await flushing;
    expect(g.written).toEqual([[{ machineId: 'm1', at: 1000 }]]);
    // The later arrival waits for the next flush.
    expect(l.heardAt('m1')).toBe(1200);
    const next = l.flush(g.store, 1300);
    g.release();
    await next;
    expect(l.heardAt('m1')).toBeUndefined();
  });

  it('keeps answering after a refused flush, the arrival kept for the next one', async () => {
    const l = new HeartbeatLiveness();
    const g = gatedStore();
    l.record('m1', 1000);
    const flushing = l.flush(g.store, 1100);
    g.release(new Error('busy'));
    await expect(flushing).rejects.toThrow('busy');
    expect(l.heardAt('m1')).toBe(1000);
  });
});
