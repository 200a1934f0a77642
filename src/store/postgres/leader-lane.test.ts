import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, freshSchema, serviceMissing } from '../../../test/support/services.js';
import { cpuMachine } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { dropPostgresSchema, openPostgresStore } from './open-postgres-store.js';

/**
 * The leader's lane (docs/replicas.md, "The leader's lane"): the lease's renewal and the leader's
 * loops (asLeader) run on connections of their own, so a pool whose every connection is taken by
 * the agents' requests, with more waiting, does not hold them. Without it, 5,000 agents on two
 * replicas kept the renewals waiting past the lease, leadership went back and forth, and nothing
 * was placed nor found lost (bench:fleet).
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);

describe.skipIf(missing !== null)("the leader's lane (postgres)", () => {
  let store: KyselyStore | undefined;
  let schema = '';
  afterEach(async () => {
    await store?.close();
    await dropPostgresSchema(POSTGRES_URL, schema);
  });

  it("renews the lease and runs the leader's reaper while the request pool is full and queued behind", async () => {
    schema = freshSchema('leader_lane');
    store = await openPostgresStore(POSTGRES_URL, { schema, poolSize: 2 });
    const s = store;
    const now = Date.now();
    await s.machineRegister({ ...cpuMachine('m1'), now: now - 60_000 });
    const lease = await s.leaderClaim({ holder: 'r1', now, ttlMs: 5_000 });
    expect(lease.leader).toBe(true);
    const leader = s.asLeader(() => ({ holder: 'r1', term: lease.term }));

    // The requests' pool: both connections busy for 1.5 s, four more statements waiting behind them.
    const busy = Array.from({ length: 6 }, () => sql`select pg_sleep(1.5)`.execute(s.db));
    await new Promise((r) => setTimeout(r, 100));
    const timed = async <T>(f: () => Promise<T>) => {
      const t = performance.now();
      const out = await f();
      return { out, ms: performance.now() - t };
    };
    const renewal = await timed(() => s.leaderClaim({ holder: 'r1', now: Date.now(), ttlMs: 5_000 }));
    const reap = await timed(() => leader.machinesReap({ now: Date.now(), suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 }));
    // A request's read waits its turn in the full pool: the lane is what made the others quick.
    const request = await timed(() => s.machineList());
    await Promise.all(busy);

    expect(renewal.out).toMatchObject({ leader: true, term: lease.term });
    expect(reap.out.machines.map((m) => m.to)).toEqual(['lost']);
    expect(renewal.ms).toBeLessThan(1_000);
    expect(reap.ms).toBeLessThan(1_000);
    expect(request.ms).toBeGreaterThan(1_500);
  });

  it("renews the lease while every connection of the leader's lane is held, with more queued behind", async () => {
    // The lane's three connections carry the passes, the reapers and every replica's liveness
    // writes; at 10,000 agents on two replicas they were busy past the lease, and a renewal queued
    // behind them handed leadership over (branch `collapse`). Held here by a lock on the machines.
    schema = freshSchema('lease_lane');
    store = await openPostgresStore(POSTGRES_URL, { schema });
    const s = store;
    const now = Date.now();
    const m = await s.machineRegister({ ...cpuMachine('m1'), now: now - 1_000 });
    const lease = await s.leaderClaim({ holder: 'r1', now, ttlMs: 5_000 });
    const locker = await s.db.connection().execute(async (c) => {
      await sql`begin`.execute(c);
      await sql`lock table machines in access exclusive mode`.execute(c);
      // Five liveness flushes on the lane: three wait on the lock, two for a connection.
      const flushes = Array.from({ length: 5 }, (_, i) => s.machinesSeen({ seen: [{ machineId: m.id, at: now + i }], now: now + i }));
      await new Promise((r) => setTimeout(r, 200));
      const t = performance.now();
      const timed = s.leaderClaim({ holder: 'r1', now: Date.now(), ttlMs: 5_000 }).then((renewal) => ({ renewal, ms: performance.now() - t }));
      await new Promise((r) => setTimeout(r, 1_300));
      await sql`commit`.execute(c);
      await Promise.all(flushes);
      return timed;
    });
    expect(locker.renewal).toMatchObject({ leader: true, term: lease.term });
    expect(locker.ms).toBeLessThan(1_000);
    // Its wait before the statement is timed, for the slow claim's log.
    expect(locker.renewal.waitedMs).toBeGreaterThanOrEqual(0);
  });
});
