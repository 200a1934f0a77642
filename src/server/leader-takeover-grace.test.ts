import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { cpuMachine } from '../store/conformance/fixtures.js';
import type { KyselyStore } from '../store/kysely/kysely-store.js';
import { freshPostgresStore } from '../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../test/support/services.js';
import { createControlPlane, type ControlPlane } from './control-plane.js';
import { defaultServerConfig } from './server-config.js';

/**
 * A replica that takes the lease over judges no machine for `lostAfterMs` (docs/failure-detection.md,
 * "After a leader change"). The rows it judges by were written by every replica's liveness loop;
 * a predecessor that lost its lease for being overloaded had likely not flushed its agents'
 * arrivals either. At 10,000 agents on PostgreSQL × 2 a new leader that judged at once found the
 * live fleet silent, lost it, and the writes of its return overloaded the leader in turn: an
 * election every ~35 s (branch `collapse`). On a clock the test moves; the lease held by a replica
 * that is not started here ("r1"), whose arrivals the test writes late, as its lagging flush would.
 */
const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);

describe.skipIf(pgMissing !== null)('a new leader waits a loss period before judging machines (postgres)', () => {
  let dir = '';
  let store: KyselyStore;
  let cp: ControlPlane | null = null;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-takeover-'));
  });
  /** Short periods on a clock the test moves: a lease of 300 ms, renewed only as the test moves the clock. */
  const configWith = (lostAfterMs: number) =>
    defaultServerConfig({
      dataDir: dir,
      port: 0,
      host: '127.0.0.1',
      heartbeatMs: 100,
      suspectAfterMs: 200,
      lostAfterMs,
      leaderTtlMs: 300,
      schedulerIntervalMs: 3_600_000,
    });
  afterEach(async () => {
    await cp?.stop();
    cp = null;
    rmSync(dir, { recursive: true, force: true });
  });

  it("does not judge a live machine lost from its predecessor's unflushed rows; a silent one is lost once the grace is over", async () => {
    const t0 = 1_800_000_000_000;
    let now = t0;
    // Periods short enough that the grace ends inside one lease: the clock stands still between
    // the test's moves, so this replica's renewals all give it until the move + 300 ms.
    const config = configWith(250);
    store = await freshPostgresStore('takeover');
    const live = await store.machineRegister({ ...cpuMachine('live'), now: t0 });
    await store.machineRegister({ ...cpuMachine('dead'), now: t0 });
    // r1 leads until t0 + 1 s; this replica starts meanwhile and takes over once that lease ran out.
    await store.leaderClaim({ holder: 'r1', now: t0, ttlMs: 1_000 });
    cp = await createControlPlane(config, { store, clock: { now: () => now }, random: () => 0.5, logger: false });
    await cp.start();
    const leads = async () => (await cp!.app.inject({ url: '/healthz' })).json<{ leader?: boolean }>().leader === true;
    expect(await leads()).toBe(false);

    // Past the restart grace (t0 + 250 ms) and r1's lease: both rows 2 s old, `live`'s arrivals still in r1's hands.
    const gained = t0 + 2_000;
    now = gained;
    for (let i = 0; i < 300 && !(await leads()); i++) await new Promise((r) => setTimeout(r, 10));
    expect(await leads()).toBe(true);
    const health = async () => Object.fromEntries((await store.machineList()).map((m) => [m.name, m.health]));
    await cp.loops.reconciler.lostMachines.runOnce();
    // Before: judged at once, both lost (judgeFrom was counted from the server's start only).
    expect(await health()).toEqual({ live: 'ready', dead: 'ready' });

    // r1's flush lands late; the grace ends lostAfterMs after the takeover.
    now = gained + 200;
    await store.machinesSeen({ seen: [{ machineId: live.id, at: now }], now });
    now = gained + config.lostAfterMs - 1;
    await cp.loops.reconciler.lostMachines.runOnce();
    expect(await health()).toEqual({ live: 'ready', dead: 'ready' });
    now = gained + config.lostAfterMs + 1;
    await cp.loops.reconciler.lostMachines.runOnce();
    expect(await health()).toEqual({ live: 'ready', dead: 'lost' });
  });

  it('a lease that changes term more often than the loss period does not hold judging back for ever (found in review)', async () => {
    const t0 = 1_800_000_000_000;
    let now = t0;
    const config = configWith(1_000);
    store = await freshPostgresStore('takeover_churn');
    await store.machineRegister({ ...cpuMachine('dead'), now: t0 });
    cp = await createControlPlane(config, { store, clock: { now: () => now }, random: () => 0.5, logger: false });
    await cp.start();
    const term = async () => Number((await store.db.selectFrom('leader').select('term').executeTakeFirstOrThrow()).term);
    const health = async () => (await store.machineList()).map((m) => m.health);
    // Each step moves the clock past the 300 ms lease: the renewal finds it run out and takes a new
    // term, a gain each time. Before the bound every gain pushed the grace on, and the dead machine
    // stayed ready 4.8 s after its last heartbeat (a loss period of 1 s).
    const seen: string[] = [];
    for (let step = 0; step < 12 && !seen.includes('lost'); step++) {
      const before = await term();
      now += 400;
      for (let i = 0; i < 300 && (await term()) === before; i++) await new Promise((r) => setTimeout(r, 10));
      await cp.loops.reconciler.lostMachines.runOnce();
      seen.push(...(await health()));
    }
    expect(seen).toContain('lost');
  }, 60_000);
});
