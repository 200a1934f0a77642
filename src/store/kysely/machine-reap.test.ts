import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, freshSchema, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import { dropPostgresSchema, openPostgresStore } from '../postgres/open-postgres-store.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import { REAP_BATCH } from './reap-batches.js';

/**
 * The reaper under load (docs/failure-detection.md, "The reaper under load"): a dead machine is
 * judged lost, its attempt with it, at the reaper's first pass, while another replica's liveness
 * loop writes every other machine's heartbeat without pause. Each silent machine is judged in a
 * transaction of its own, reading and writing that machine's row and attempts only.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const t0 = 1_700_000_000_000;
const FLEET = 300;

const dialects = [
  {
    name: 'sqlite',
    skip: false,
    open: async () => {
      const dir = mkdtempSync(join(tmpdir(), 'gantry-reap-'));
      const reaper = await openSqliteStore(join(dir, 'gantry.db'));
      const replica = await openSqliteStore(join(dir, 'gantry.db'));
      const close = async () => {
        await reaper.close();
        await replica.close();
        rmSync(dir, { recursive: true, force: true });
      };
      return { reaper, replica, close };
    },
  },
  {
    name: 'postgres',
    skip: missing !== null,
    open: async () => {
      const schema = freshSchema('reap');
      const reaper = await openPostgresStore(POSTGRES_URL, { schema });
      const replica = await openPostgresStore(POSTGRES_URL, { schema });
      const close = async () => {
        await reaper.close();
        await replica.close();
        await dropPostgresSchema(POSTGRES_URL, schema);
      };
      return { reaper, replica, close };
    },
  },
] as const;

describe.each(dialects)('the reaper under load ($name)', ({ skip, open }) => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
  });

  it.skipIf(skip)("loses a dead machine, and its attempt, at its pass while another replica writes every live machine's heartbeat", async () => {
    const o = await open();
    close = o.close;
    const { reaper, replica } = o;
    const live: string[] = [];
    for (let i = 0; i < FLEET; i++) live.push((await replica.machineRegister({ ...cpuMachine(`m${String(i).padStart(4, '0')}`), now: t0 })).id);
    const dead = await replica.machineRegister({ ...cpuMachine('dead'), now: t0 });
    const j = await replica.jobSubmit({ definition: job([stage('a')]), source: null, now: t0 });
    const s = (await replica.jobGet({ jobId: j.id }))!.stages[0]!;
    const placed = await replica.planApply({
      plan: { placements: [{ stageId: s.id, machineId: dead.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 }], pending: [] },
      now: t0,
      leaseMs: 60_000,
    });
    expect(placed.applied).toHaveLength(1);

    // The other replica's liveness loop, flat out: every live machine's heartbeat, one transaction
    // after another, each later than the last, until the reaper is done.
    let at = t0 + 10_000;
    let writing = true;
    let flushes = 0;
    const liveness = (async () => {
      while (writing) {
        at += 50;
        const now = at;
        await replica.machinesSeen({ seen: live.map((machineId) => ({ machineId, at: now })), now });
        flushes++;
      }
    })();
    try {
      // The reaper's clock is past the dead machine's lost allowance, and never past a live one's.
      while (flushes < 3) await new Promise((r) => setTimeout(r, 5));
      const passes = [];
      for (let k = 0; k < 5; k++) passes.push(await reaper.machinesReap({ now: t0 + 11_000 + k, suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 }));
      expect(passes[0]!.machines).toEqual([{ machineId: dead.id, from: 'ready', to: 'lost' }]);
      expect(passes[0]!.lostAttempts).toEqual([placed.applied[0]!.id]);
      for (const p of passes.slice(1)) expect(p).toEqual({ machines: [], lostAttempts: [] });
      // The liveness loop wrote throughout (it never pauses: a flush was in flight when the passes
      // began) and still completes flushes after them: it was neither stuck behind the reaper nor
      // refused. Not a count of flushes during the passes: five passes can all fit inside one
      // flush of 300 rows on a loaded machine (CI: `expected 3 to be greater than 3`).
      const during = flushes;
      while (flushes === during) await new Promise((r) => setTimeout(r, 5));
    } finally {
      writing = false;
      await liveness;
    }
    expect((await reaper.machineGet({ machineId: dead.id }))!.health).toBe('lost');
    const healths = new Set((await reaper.machineList()).filter((m) => m.id !== dead.id).map((m) => m.health));
    expect([...healths]).toEqual(['ready']);
  });
});

/**
 * A mass loss (docs/failure-detection.md, "A mass loss"): a rack of machines silent at once is
 * judged REAP_BATCH machines to a transaction, each with the same guarded write. On PostgreSQL the
 * pass's transactions are counted (each begins with a START): one a machine, 250 here, before.
 */
describe.each(dialects)('a mass loss ($name)', ({ name, skip, open }) => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await close?.();
    close = undefined;
  });

  it.skipIf(skip)('loses 250 silent machines and their attempts at one pass, a transaction per batch', async () => {
    // Before the stores open: each connection keeps the query method it found when it was made
    // (postgres/multi-results.ts), so a counter installed later counted nothing (0 <= 3 passed).
    const counter = name === 'postgres' ? countStatements() : null;
    const o = await open();
    close = o.close;
    const { reaper, replica } = o;
    const RACK = 250;
    const dead: string[] = [];
    for (let i = 0; i < RACK; i++) dead.push((await replica.machineRegister({ ...cpuMachine(`rack-${String(i).padStart(4, '0')}`), now: t0 })).id);
    const live = await replica.machineRegister({ ...cpuMachine('live'), now: t0 });
    const ids = await replica.jobSubmitBatch({ definitions: dead.map(() => job([stage('a')])), now: t0 });
    const stages = await Promise.all(ids.map(async (jobId) => (await replica.jobGet({ jobId }))!.stages[0]!));
    const placed = await replica.planApply({
      plan: { placements: stages.map((s, i) => ({ stageId: s.id, machineId: dead[i]!, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })), pending: [] },
      now: t0,
      leaseMs: 60_000,
    });
    expect(placed.applied).toHaveLength(RACK);
    await replica.machinesSeen({ seen: [{ machineId: live.id, at: t0 + 10_500 }], now: t0 + 10_500 });

    counter?.reset();
    const pass = await reaper.machinesReap({ now: t0 + 11_000, suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 });
    const starts = counter?.snapshot().byKind.get('START') ?? 0;

    expect(pass.machines).toHaveLength(RACK);
    expect(new Set(pass.machines.map((m) => m.machineId))).toEqual(new Set(dead));
    expect(pass.machines.every((m) => m.to === 'lost')).toBe(true);
    expect(new Set(pass.lostAttempts)).toEqual(new Set(placed.applied.map((a) => a.id)));
    if (counter) expect(starts).toBeLessThanOrEqual(Math.ceil(RACK / REAP_BATCH));
    if (counter) expect(starts).toBeGreaterThan(0);
    // Their stages wait to be placed elsewhere; the live machine is left as it was.
    const after = await reaper.jobGet({ jobId: ids[0]! });
    expect(after!.stages[0]!.state).toBe('ready');
    expect((await reaper.machineGet({ machineId: live.id }))!.health).toBe('ready');
    expect(await reaper.machinesReap({ now: t0 + 11_001, suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 })).toEqual({ machines: [], lostAttempts: [] });
  });
});
