import { describe, expect, it } from 'vitest';
import { MachineTurns } from './machine-turns.js';

/** A report's transaction that runs until the test lets it end. */
function held() {
  let end!: () => void;
  const done = new Promise<void>((r) => (end = r));
  let began = false;
  return {
    fn: async () => {
      began = true;
      await done;
      return 'ok';
    },
    end,
    get began() {
      return began;
    },
  };
}

/** Lets every promise settled so far run its reactions. */
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('MachineTurns: one machine’s reports one at a time, in arrival order', () => {
  it('a second report of the machine begins when the first ends, not before; another machine’s at once', async () => {
    const turns = new MachineTurns();
    const [a, b, c, other] = [held(), held(), held(), held()];
    const ra = turns.run('m1', undefined, a.fn);
    const rb = turns.run('m1', undefined, b.fn);
    const rc = turns.run('m1', undefined, c.fn);
    const ro = turns.run('m2', undefined, other.fn);
    await settle();
    expect([a.began, b.began, c.began, other.began]).toEqual([true, false, false, true]);
    a.end();
    await ra;
    await settle();
    expect([b.began, c.began]).toEqual([true, false]);
    b.end();
    c.end();
    other.end();
    expect(await Promise.all([rb, rc, ro])).toEqual(['ok', 'ok', 'ok']);
    // Nothing kept once a machine's reports are done.
    expect(turns.machines).toBe(0);
  });

  it('one that fails is the next one’s turn all the same', async () => {
    const turns = new MachineTurns();
    const b = held();
    const ra = turns.run('m1', undefined, () => Promise.reject(new Error('conflict, gave up')));
    const rb = turns.run('m1', undefined, b.fn);
    await expect(ra).rejects.toThrow('gave up');
    await settle();
    expect(b.began).toBe(true);
    b.end();
    await rb;
    expect(turns.machines).toBe(0);
  });

  it('a report given up while it waits never runs, and leaves its place to the next; one given up while it runs runs to its end', async () => {
    const turns = new MachineTurns();
    const [a, b, c] = [held(), held(), held()];
    const gaveUpRunning = new AbortController();
    const gaveUpWaiting = new AbortController();
    const ra = turns.run('m1', gaveUpRunning.signal, a.fn);
    const rb = turns.run('m1', gaveUpWaiting.signal, b.fn);
    const rc = turns.run('m1', undefined, c.fn);
    await settle();
    gaveUpWaiting.abort(new Error('agent timed out'));
    await expect(rb).rejects.toThrow('agent timed out');
    gaveUpRunning.abort(new Error('agent timed out too'));
    await settle();
    expect(c.began).toBe(false);
    a.end();
    expect(await ra).toBe('ok');
    await settle();
    expect([b.began, c.began]).toEqual([false, true]);
    c.end();
    await rc;
    expect(turns.machines).toBe(0);
  });

  it('a report whose request is gone before it arrives does not run', async () => {
    const turns = new MachineTurns();
    const gone = new AbortController();
    gone.abort(new Error('closed'));
    const a = held();
    await expect(turns.run('m1', gone.signal, a.fn)).rejects.toThrow('closed');
    expect(a.began).toBe(false);
    expect(turns.machines).toBe(0);
  });

  it('at most maxWaiting wait: one more runs at once, as without turns, and the line still empties', async () => {
    const turns = new MachineTurns(2);
    const runs = [held(), held(), held(), held()];
    const results = runs.map((r) => turns.run('m1', undefined, r.fn));
    await settle();
    // The first runs, two wait, the fourth found the line full and ran beside the first.
    expect(runs.map((r) => r.began)).toEqual([true, false, false, true]);
    for (const r of runs) r.end();
    await Promise.all(results);
    await settle();
    expect(runs.every((r) => r.began)).toBe(true);
    expect(turns.machines).toBe(0);
  });
});
