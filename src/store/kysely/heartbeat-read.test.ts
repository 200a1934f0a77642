import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, stage, startedOneStage } from '../conformance/fixtures.js';
import type { KyselyStore } from './kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

describe.skipIf(pgMissing)('a heartbeat that writes nothing: one read, no transaction (PostgreSQL)', () => {
  let store: KyselyStore;
  const t0 = 1_700_000_000_000;
  beforeEach(async () => {
    store = await freshPostgresStore('hb_read');
  });
  afterEach(async () => {
    await store?.close();
  });

  /** The heartbeat route's settings under the liveness loop: the row written only past 3 s, leases renewed past 1 s. */
  const beat = (machineId: string, now: number, running: { attemptId: string; token: number }[] = []) =>
    store.machineHeartbeat({ machineId, running, now, leaseMs: 10_000, missingAfterMs: 4000, jitter: 0, renewAfterMs: 1000, livenessAfterMs: 3000 });
  /** Round trips since the last reset, and the transactions begun among them. */
  const sent = () => ({ trips: statements.snapshot().total, transactions: statements.snapshot().byKind.get('START') ?? 0 });

  it('an idle machine seen lately: one statement, no transaction, the same answer', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now: t0 });
    statements.reset();
    expect(await beat(m.id, t0 + 1000)).toEqual({ health: 'ready', kill: [], lost: [], placed: [] });
    expect(sent()).toEqual({ trips: 1, transactions: 0 });
  });

  it('what the machine holds comes with the same read: a placement not started is named, a stale token killed', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now: t0 });
    const { a } = await startedOneStage(store, { machineId: m.id, now: t0, leaseMs: 10_000 });
    const placed = await store.planApply({
      plan: {
        placements: [
          {
            stageId: (await store.jobSubmit({ definition: job([stage('b')]), source: null, now: t0 })).stages[0]!.id,
            machineId: m.id,
            gpuIndices: [],
            cpuMillis: 1000,
            memoryBytes: 2 ** 28,
          },
        ],
        pending: [],
      },
      now: t0,
      leaseMs: 10_000,
    });
    statements.reset();
    expect(await beat(m.id, t0 + 500, [{ attemptId: a.id, token: a.token }])).toEqual({ health: 'ready', kill: [], lost: [], placed: [placed.applied[0]!.id] });
    expect(await beat(m.id, t0 + 600, [{ attemptId: a.id, token: a.token + 1 }])).toMatchObject({ kill: [{ attemptId: a.id, reason: 'stale token' }] });
    expect(sent()).toEqual({ trips: 2, transactions: 0 });
  });

  it('a heartbeat that must write runs its transaction: a suspect machine back, an attempt it does not hold, a row gone stale', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now: t0 });
    await store.machinesReap({ now: t0 + 6000, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0 });
    expect((await store.machineGet({ machineId: m.id }))?.health).toBe('suspect');
    statements.reset();
    expect(await beat(m.id, t0 + 6100)).toMatchObject({ health: 'ready' });
    expect(sent().transactions).toBe(1);
    statements.reset();
    expect(await beat(m.id, t0 + 6200, [{ attemptId: 'a-unknown', token: 1 }])).toMatchObject({
      kill: [{ attemptId: 'a-unknown', reason: 'unknown attempt' }],
    });
    expect(sent().transactions).toBe(1);
    // Past the 3 s the liveness allows, the row is written (the liveness loop lagging).
    statements.reset();
    await beat(m.id, t0 + 9500);
    expect(sent().transactions).toBe(1);
    expect(Number((await store.db.selectFrom('machines').select('last_heartbeat_at').where('id', '=', m.id).executeTakeFirstOrThrow()).last_heartbeat_at)).toBe(
      t0 + 9500,
    );
  });
});
