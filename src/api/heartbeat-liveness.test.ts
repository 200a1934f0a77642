import { describe, expect, it } from 'vitest';
import type { MachineSeen, Store } from '../store/store.js';
import { HeartbeatLiveness } from './heartbeat-liveness.js';

/**
 * A store whose machinesSeen, as SQLite's group commit, starts its transaction after the I/O of
 * the event loop's turn (setImmediate), and notes each call in `log`; `failAt`: that call fails.
 */
function storeNoting(log: string[], failAt?: number): Store {
  let calls = 0;
  const machinesSeen = (p: { seen: readonly MachineSeen[] }) =>
    new Promise<number>((resolve, reject) =>
      setImmediate(() => {
        if (++calls === failAt) return reject(new Error('busy'));
        log.push(`write ${p.seen.map((s) => s.machineId).join(',')}`);
        resolve(p.seen.length);
      }),
    );
  return { machinesSeen } as unknown as Store;
}

describe('HeartbeatLiveness', () => {
  it('writes a flush in pieces, each its own transaction, letting requests that arrive meanwhile run between them', async () => {
    const log: string[] = [];
    const liveness = new HeartbeatLiveness(2);
    for (const m of ['a', 'b', 'c', 'd', 'e']) liveness.record(m, 1000, 4000);
    // A request arriving as the flush starts (its I/O callback): it runs after the first piece, not after the flush.
    setImmediate(() => setImmediate(() => log.push('request')));
    expect(await liveness.flush(storeNoting(log), 1000)).toBe(5);
    expect(log).toEqual(['write a,b', 'request', 'write c,d', 'write e']);
  });

  it('keeps what a failed piece and those after it held for the next flush, a later arrival winning', async () => {
    const log: string[] = [];
    const liveness = new HeartbeatLiveness(2);
    for (const m of ['a', 'b', 'c', 'd', 'e']) liveness.record(m, 1000, 4000);
    const flushing = liveness.flush(storeNoting(log, 2), 1000);
    // Arrives while the flush runs: newer than what the failed piece held for it.
    liveness.record('e', 2000, 4000);
    await expect(flushing).rejects.toThrow('busy');
    const kept: MachineSeen[] = [];
    await liveness.flush({ machinesSeen: async (p: { seen: readonly MachineSeen[] }) => (kept.push(...p.seen), p.seen.length) } as unknown as Store, 3000);
    expect(log).toEqual(['write a,b']);
    expect(kept.sort((x, y) => x.machineId.localeCompare(y.machineId))).toEqual([
      { machineId: 'c', at: 1000, periodMs: 4000 },
      { machineId: 'd', at: 1000, periodMs: 4000 },
      { machineId: 'e', at: 2000, periodMs: 4000 },
    ]);
  });

  it('writes in one piece where no bound is given (PostgreSQL)', async () => {
    const log: string[] = [];
    const liveness = new HeartbeatLiveness();
    for (const m of ['a', 'b', 'c']) liveness.record(m, 1000);
    expect(await liveness.flush(storeNoting(log), 1000)).toBe(3);
    expect(log).toEqual(['write a,b,c']);
  });
});
