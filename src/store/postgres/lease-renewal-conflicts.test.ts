import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, startedOneStage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

/**
 * The lease-renewing heartbeat's writes (heartbeat-renewal.ts, READ COMMITTED) raced against the
 * reapers that were refused beside them: a rack's loss judged while the live machines renew their
 * leases (docs/failure-detection.md, "Which writers the reapers meet").
 */
describe.skipIf(pgMissing)('lease-renewing heartbeats beside the reapers (PostgreSQL)', () => {
  let store: KyselyStore;
  const t0 = 1_700_000_000_000;
  const leaseMs = 10_000;
  beforeEach(async () => {
    store = await freshPostgresStore('renew_race');
  });
  afterEach(async () => {
    await store?.close();
  });

  /** The heartbeat route's settings under the liveness loop: the row written past 3 s, leases renewed past 1 s. */
  const beat = (machineId: string, now: number, a: { id: string; token: number }) =>
    store.machineHeartbeat({
      machineId,
      running: [{ attemptId: a.id, token: a.token }],
      now,
      leaseMs,
      missingAfterMs: 4000,
      jitter: 0,
      renewAfterMs: 1000,
      livenessAfterMs: 3000,
    });
  const attempt = (id: string) => store.db.selectFrom('attempts').select(['state', 'lease_expires_at']).where('id', '=', id).executeTakeFirstOrThrow();
  /** Machines, each running one stage placed and started at t0. */
  const rack = async (prefix: string, n: number) => {
    const out: { id: string; a: { id: string; token: number } }[] = [];
    for (let i = 0; i < n; i++) {
      const m = await store.machineRegister({ ...cpuMachine(`${prefix}${i}`), now: t0 });
      out.push({ id: m.id, a: (await startedOneStage(store, { machineId: m.id, now: t0, leaseMs })).a });
    }
    return out;
  };

  it('a rack of 100 lost while 40 live machines renew their leases: nothing refused, each lost machine and attempt lost once, every live lease renewed', async () => {
    const dead = await rack('dead-', 100);
    const live = await rack('live-', 40);
    const liveIds = new Set(live.map((m) => m.id));
    // Past lostAfterMs for every row; the live machines' arrivals held by the leader's liveness (`heard`), as in a fleet.
    const t1 = t0 + 11_000;
    const beats = [0, 1500, 3000, 4500];
    statements.reset();
    const [reaped] = await Promise.all([
      store.machinesReap({ now: t1, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0, heard: (id) => (liveIds.has(id) ? t1 : undefined) }),
      ...live.map(async (m) => {
        for (const dt of beats) expect((await beat(m.id, t1 + dt, m.a)).kill).toEqual([]);
      }),
    ]);
    // Under SERIALIZABLE the batch's reads (a hundred machines and attempts: locks promoted to the
    // whole relations) and the heartbeats' lease writes refused one another.
    expect(statements.snapshot().conflicts).toBe(0);
    expect(reaped.machines.filter((c) => c.to === 'lost').map((c) => c.machineId)).toEqual(dead.map((m) => m.id).sort());
    expect(reaped.lostAttempts.sort()).toEqual(dead.map((m) => m.a.id).sort());
    const lostEvents = await store.db.selectFrom('events').select('machine_id').where('type', '=', 'machine:lost').execute();
    expect(lostEvents.map((e) => e.machine_id).sort()).toEqual(dead.map((m) => m.id).sort());
    for (const m of dead) expect(await attempt(m.a.id)).toMatchObject({ state: 'lost', lease_expires_at: null });
    for (const m of live) {
      expect((await store.machineGet({ machineId: m.id }))?.health).toBe('ready');
      const a = await attempt(m.a.id);
      expect(a.state).toBe('running');
      expect(Number(a.lease_expires_at)).toBe(t1 + beats.at(-1)! + leaseMs);
    }
  });

  it('a renewal and the lost-attempts reaper on the same overdue leases: each attempt either renewed and running or lost once, never both', async () => {
    const machines = await rack('m-', 40);
    // The leases (t0 + 10 s) ran out; the machines heartbeat just then.
    const t1 = t0 + 11_000;
    const [reaped] = await Promise.all([store.attemptsReap({ now: t1, ackTimeoutMs: 60_000, jitter: 0 }), ...machines.map((m) => beat(m.id, t1, m.a))]);
    const lost = new Set(reaped.lostAttempts);
    const events = await store.db.selectFrom('events').select('attempt_id').where('type', '=', 'attempt:lost').execute();
    expect(events.map((e) => e.attempt_id).sort()).toEqual([...lost].sort());
    for (const m of machines) {
      const a = await attempt(m.a.id);
      if (lost.has(m.a.id)) expect(a).toMatchObject({ state: 'lost', lease_expires_at: null });
      else expect({ state: a.state, lease: Number(a.lease_expires_at) }).toEqual({ state: 'running', lease: t1 + leaseMs });
    }
  });

  /** Runs `between` once, just before the next READ COMMITTED transaction: after a heartbeat's read, before its renewal. */
  const betweenReadAndRenewal = (between: () => Promise<unknown>) => {
    const s = store as unknown as { tx: (now: number, body: unknown, opts?: { readCommitted?: boolean }) => Promise<unknown> };
    const tx = s.tx.bind(store);
    let pending: (() => Promise<unknown>) | null = between;
    s.tx = async (now, body, opts) => {
      const run = opts?.readCommitted ? pending : null;
      if (run) {
        pending = null;
        await run();
      }
      return tx(now, body, opts);
    };
    return () => pending === null;
  };

  it('an attempt lost between the read and the renewal is in the answer, not left to the next heartbeat', async () => {
    const [m] = await rack('m-', 1);
    // Its lease (to t0 + 10 s) older than renewAfterMs: this heartbeat renews; the reaper, judging at t0 + 11 s, loses it first.
    const ran = betweenReadAndRenewal(() => store.attemptsReap({ now: t0 + 11_000, ackTimeoutMs: 60_000, jitter: 0 }));
    const answer = await beat(m!.id, t0 + 9_500, m!.a);
    expect(ran()).toBe(true);
    expect((await attempt(m!.a.id)).state).toBe('lost');
    expect(answer.kill.map((k) => k.attemptId)).toEqual([m!.a.id]);
  });

  it('a machine judged lost between the read and the renewal is brought back, its lost attempt in the answer', async () => {
    const [m] = await rack('m-', 1);
    const ran = betweenReadAndRenewal(() => store.machinesReap({ now: t0 + 11_000, suspectAfterMs: 5000, lostAfterMs: 10_000, jitter: 0 }));
    const answer = await beat(m!.id, t0 + 9_500, m!.a);
    expect(ran()).toBe(true);
    expect((await store.machineGet({ machineId: m!.id }))?.health).toBe('ready');
    expect(answer.kill.map((k) => k.attemptId)).toEqual([m!.a.id]);
    const types = (await store.db.selectFrom('events').select('type').where('machine_id', '=', m!.id).orderBy('seq').execute()).map((e) => e.type);
    expect(types.filter((t) => t === 'machine:lost' || t === 'machine:ready')).toEqual(['machine:lost', 'machine:ready']);
  });

  it("the leader's renewal (READ COMMITTED) beside a rival's claim: one leader a term, whichever commits first", async () => {
    const ttlMs = 5000;
    let now = t0;
    let term = (await store.leaderClaim({ holder: 'a', now, ttlMs })).term;
    for (let round = 0; round < 20; round++) {
      // Alternately inside the lease (a renews, b is refused) and just past it (either may take the next term).
      now += round % 2 === 0 ? 4000 : ttlMs + 1;
      const [a, b] = await Promise.all([store.leaderClaim({ holder: 'a', now, ttlMs }), store.leaderClaim({ holder: 'b', now, ttlMs })]);
      const row = await store.db.selectFrom('leader').selectAll().executeTakeFirstOrThrow();
      const leaders = [a, b].filter((l) => l.leader);
      expect(leaders).toHaveLength(1);
      expect({ holder: row.holder, term: Number(row.term) }).toEqual({ holder: leaders[0]!.holder, term: leaders[0]!.term });
      // A term only grows, and only by a takeover.
      expect(Number(row.term)).toBeGreaterThanOrEqual(term);
      term = Number(row.term);
      // b won a takeover: it resigns, and a takes the next term, to be the holder of the next round.
      if (leaders[0]!.holder === 'b') {
        await store.leaderResign({ holder: 'b', term });
        term = (await store.leaderClaim({ holder: 'a', now, ttlMs })).term;
      }
    }
  });
});
