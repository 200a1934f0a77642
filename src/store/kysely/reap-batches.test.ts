import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreBusyError } from '../../domain/errors.js';
import { POSTGRES_URL, freshSchema, serviceMissing } from '../../../test/support/services.js';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import { dropPostgresSchema, openPostgresStore } from '../postgres/open-postgres-store.js';
import type { Store } from '../store.js';
import { BATCH_TRIES, REAP_BATCH, reapInBatches } from './reap-batches.js';

/**
 * A mass loss with a conflict in it (docs/failure-detection.md, "A mass loss"): one row the
 * database keeps refusing holds back only its own machine or attempt, until the next pass; the
 * rest of the rack is judged at the pass. Before, one such row refused the whole pass: the lost-
 * attempts duty's one transaction (8-9 passes given up in a row at 5,000 agents on PostgreSQL x
 * 2 with 500 machines stopped), and the machine reaper's batch, then its machines one by one until
 * the refused one threw and left every machine after it unjudged.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const t0 = 1_700_000_000_000;
const RACK = 250;

/**
 * Every statement of this process that writes the attempt `refused.id` answered as PostgreSQL
 * answers a serialization failure (40001), before it is sent: the conflict of a writer that never
 * lets go of that row, without the timing of a real one. Installed before the store opens: its
 * connections keep the query method they found (multi-results.ts).
 */
const refused: { id: string | null } = { id: null };
const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const original = proto.query;
proto.query = function (this: object, ...args: unknown[]) {
  const [first, second] = args;
  const text = typeof first === 'string' ? first : typeof first === 'object' && first !== null && 'text' in first ? String(first.text) : '';
  const values = Array.isArray(second) ? second : typeof first === 'object' && first !== null && 'values' in first ? (first.values as unknown[]) : [];
  if (refused.id !== null && /^update ("[^"]*"\.)?"attempts"/i.test(text.trim()) && values.includes(refused.id)) {
    return Promise.reject(Object.assign(new Error('could not serialize access due to concurrent update'), { code: '40001', severity: 'ERROR' }));
  }
  return original.apply(this, args);
};

/** RACK machines, each holding one attempt of a one-stage job: the first `started` of them running on a short lease, the others scheduled. */
async function rack(store: Store, started: number) {
  const machines: string[] = [];
  for (let i = 0; i < RACK; i++) machines.push((await store.machineRegister({ ...cpuMachine(`rack-${String(i).padStart(4, '0')}`), now: t0 })).id);
  const ids = await store.jobSubmitBatch({ definitions: machines.map(() => job([stage('a')])), now: t0 });
  const stages = await Promise.all(ids.map(async (jobId) => (await store.jobGet({ jobId }))!.stages[0]!));
  const placed = await store.planApply({
    plan: {
      placements: stages.map((s, i) => ({ stageId: s.id, machineId: machines[i]!, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })),
      pending: [],
    },
    now: t0,
    leaseMs: 1000,
  });
  expect(placed.applied).toHaveLength(RACK);
  for (const a of placed.applied.slice(0, started)) await store.attemptStart({ attemptId: a.id, token: a.token, pid: 1, now: t0, leaseMs: 1000 });
  return { machines, attempts: placed.applied.map((a) => a.id) };
}

describe.skipIf(missing !== null)('a mass loss with one row refused (postgres)', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    refused.id = null;
    await close?.();
    close = undefined;
  });
  const open = async () => {
    const schema = freshSchema('reapbusy');
    const store = await openPostgresStore(POSTGRES_URL, { schema });
    close = async () => {
      await store.close();
      await dropPostgresSchema(POSTGRES_URL, schema);
    };
    return store;
  };

  it('the machine reaper judges every other machine of the rack at the pass, and the refused one at the next', async () => {
    const store = await open();
    const { machines, attempts } = await rack(store, 0);
    const held = 137;
    refused.id = attempts[held]!;
    const reap = (now: number) => store.machinesReap({ now, suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 });
    const pass = await reap(t0 + 11_000);
    expect(pass.machines).toHaveLength(RACK - 1);
    expect(new Set(pass.machines.map((m) => m.machineId))).toEqual(new Set(machines.filter((_, i) => i !== held)));
    expect(new Set(pass.lostAttempts)).toEqual(new Set(attempts.filter((_, i) => i !== held)));
    expect(pass.deferred).toBe(1);
    // Its transaction wrote nothing: the machine is as it was, its attempt still placed there.
    expect((await store.machineGet({ machineId: machines[held]! }))!.health).toBe('ready');
    refused.id = null;
    const next = await reap(t0 + 12_000);
    expect(next).toEqual({ machines: [{ machineId: machines[held]!, from: 'ready', to: 'lost' }], lostAttempts: [attempts[held]!] });
  });

  it('the lost-attempts duty loses every other overdue attempt at the pass, and the refused one at the next', async () => {
    const store = await open();
    // Half of them running past their lease, half never acknowledged: both reasons, one pass.
    const { attempts } = await rack(store, RACK / 2);
    const held = 200;
    refused.id = attempts[held]!;
    const reap = (now: number) => store.attemptsReap({ now, ackTimeoutMs: 2_000, jitter: 0 });
    const pass = await reap(t0 + 5_000);
    expect(new Set(pass.lostAttempts)).toEqual(new Set(attempts.filter((_, i) => i !== held)));
    expect(pass.deferred).toBe(1);
    refused.id = null;
    expect(await reap(t0 + 6_000)).toEqual({ machines: [], lostAttempts: [attempts[held]!] });
    expect(await reap(t0 + 7_000)).toEqual({ machines: [], lostAttempts: [] });
  });

  it('both duties at once over the same rack: every attempt lost once, by one of them, none left over', async () => {
    const store = await open();
    const { machines, attempts } = await rack(store, RACK);
    // Silent past the lost allowance and past every lease: the reaper from the start of the rack,
    // the lost-attempts duty from its end, meeting in one batch.
    const [byMachines, byAttempts] = await Promise.all([
      store.machinesReap({ now: t0 + 11_000, suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 }),
      store.attemptsReap({ now: t0 + 11_000, ackTimeoutMs: 2_000, jitter: 0 }),
    ]);
    expect(new Set(byMachines.machines.map((m) => m.machineId))).toEqual(new Set(machines));
    const lost = [...byMachines.lostAttempts, ...byAttempts.lostAttempts];
    expect(lost.sort()).toEqual([...attempts].sort());
    expect(byMachines.deferred ?? byAttempts.deferred).toBeUndefined();
  });
});

describe('reapInBatches', () => {
  it('splits a refused batch until the refused item stands alone, and leaves only it to the next pass', async () => {
    const items = Array.from({ length: 230 }, (_, i) => i);
    const calls: { size: number; maxTries?: number; place: boolean }[] = [];
    const r = await reapInBatches(items, (batch, o) => {
      calls.push({ size: batch.length, place: o.place, ...(o.maxTries !== undefined ? { maxTries: o.maxTries } : {}) });
      if (batch.includes(42)) return Promise.reject(new StoreBusyError(o.maxTries ?? 20, new Error('conflict')));
      return Promise.resolve({ machines: [], lostAttempts: batch.map(String) });
    });
    expect(r.deferred).toBe(1);
    expect(r.lostAttempts).toEqual(items.filter((i) => i !== 42).map(String));
    // The first batch REAP_BATCH long, its halves down to the one; only a single gets the store's own tries.
    expect(calls[0]).toEqual({ size: REAP_BATCH, place: false, maxTries: BATCH_TRIES });
    expect(calls.filter((c) => c.size === 1 && c.maxTries !== undefined)).toEqual([]);
    expect(calls.length).toBeLessThan(20);
  });

  it('from the end: the last batch first, each in the list order', async () => {
    const items = Array.from({ length: 230 }, (_, i) => i);
    const batches: number[][] = [];
    await reapInBatches(
      items,
      (batch) => {
        batches.push([...batch]);
        return Promise.resolve({ machines: [], lostAttempts: [] });
      },
      { fromEnd: true },
    );
    expect(batches.map((b) => [b[0], b[b.length - 1]])).toEqual([
      [200, 229],
      [100, 199],
      [0, 99],
    ]);
  });

  it('places before the commit only a pass of one, and lets any other error through', async () => {
    const one = await reapInBatches(['m'], (_b, o) => Promise.resolve({ machines: [], lostAttempts: [String(o.place)] }));
    expect(one).toEqual({ machines: [], lostAttempts: ['true'] });
    await expect(reapInBatches([1, 2], () => Promise.reject(new Error('not a conflict')))).rejects.toThrow('not a conflict');
  });
});
