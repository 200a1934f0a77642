import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, freshSchema, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, gpuMachine, job, stage } from '../conformance/fixtures.js';
import { dropPostgresSchema, openPostgresStore } from '../postgres/open-postgres-store.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { KyselyStore } from './kysely-store.js';

/**
 * The cluster's view is kept between reads and re-read when the machines' version moves
 * (cluster-view.ts, docs/scheduling.md "The cluster's view, kept"). The claim: a change of any
 * machine, made by another server on the same database (another replica; on SQLite another
 * connection to the same file), by any statement, is in the very next view. Each case opens two
 * stores on one database: `a` reads, `b` changes.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();
const now = 1_700_000_000_000;

interface Pair {
  a: KyselyStore;
  b: KyselyStore;
  close(): Promise<void>;
}

const dialects = [
  {
    name: 'sqlite',
    skip: false,
    open: async (): Promise<Pair> => {
      const dir = mkdtempSync(join(tmpdir(), 'gantry-cluster-view-'));
      const a = await openSqliteStore(join(dir, 'gantry.db'));
      const b = await openSqliteStore(join(dir, 'gantry.db'));
      return {
        a,
        b,
        close: async () => {
          await a.close();
          await b.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  },
  {
    name: 'postgres',
    skip: missing !== null,
    open: async (): Promise<Pair> => {
      const schema = freshSchema('cluster_view');
      const a = await openPostgresStore(POSTGRES_URL, { schema });
      const b = await openPostgresStore(POSTGRES_URL, { schema });
      return {
        a,
        b,
        close: async () => {
          await a.close();
          await b.close();
          await dropPostgresSchema(POSTGRES_URL, schema);
        },
      };
    },
  },
] as const;

describe.each(dialects)("the cluster's view, kept ($name)", ({ name, skip, open }) => {
  let pair: Pair | undefined;
  afterEach(async () => {
    await pair?.close();
    pair = undefined;
  });

  const viewOf = async (s: KyselyStore, machine: string) => (await s.clusterView()).machines.find((m) => m.name === machine);

  it.skipIf(skip)('sees every change another server makes, at the next read, whatever wrote it', async () => {
    pair = await open();
    const { a, b } = pair;
    const m1 = await b.machineRegister({ ...cpuMachine('m1'), now });
    expect((await a.clusterView()).machines.map((m) => m.name)).toEqual(['m1']);

    // A registration.
    await b.machineRegister({ ...gpuMachine('m2', 2), now });
    expect((await a.clusterView()).machines.map((m) => m.name)).toEqual(['m1', 'm2']);
    // A scheduling change through its verb.
    await b.machineCordon({ machine: 'm1', now });
    expect((await viewOf(a, 'm1'))?.scheduling).toBe('cordoned');
    // A health change by the reaper.
    await b.machinesReap({ now: now + 60_000, suspectAfterMs: 5_000, lostAfterMs: 10_000, jitter: 0 });
    expect((await a.clusterView()).machines.map((m) => m.health)).toEqual(['lost', 'lost']);
    // A write no verb makes (an operator's SQL, a future code path): the trigger counts it too.
    await sql`update machines set cpu_millis = 12345, labels = '{"rack":"r9"}' where id = ${m1.id}`.execute(b.db);
    const m1View = await viewOf(a, 'm1');
    expect(m1View?.cpuMillisTotal).toBe(12345);
    expect(m1View?.labels).toEqual({ rack: 'r9' });
    // A registration again with the same fields changes nothing the view reads; a removal does.
    await b.machineUncordon({ machine: 'm1', now });
    await b.machineRemove({ machine: 'm1', now });
    expect((await a.clusterView()).machines.map((m) => m.name)).toEqual(['m2']);
    // The submit's facts read the same kept rows.
    expect((await a.clusterFacts()).machines.map((m) => m.name)).toEqual(['m2']);
  });

  it.skipIf(skip)('heartbeats change no version, and a read with nothing changed reads no machine rows', async () => {
    pair = await open();
    const { a, b } = pair;
    const m1 = await b.machineRegister({ ...cpuMachine('m1'), now });
    const first = await a.clusterView();
    await b.machinesSeen({ seen: [{ machineId: m1.id, at: now + 1_000, periodMs: 4_000 }], now: now + 1_000 });
    await b.machineHeartbeat({ machineId: m1.id, running: [], now: now + 2_000, leaseMs: 10_000, missingAfterMs: 10_000, jitter: 0 });
    statements.reset();
    const second = await a.clusterView();
    expect(second.version).toBe(first.version);
    if (name === 'postgres') {
      const texts = [...statements.snapshot().byText.keys()];
      expect(texts.some((t) => t.includes('from "machines" order by "name"'))).toBe(false);
      expect(texts.some((t) => t.includes('sum(revision)'))).toBe(true);
    }
    // A change moves it, and only up.
    await b.machineCordon({ machine: 'm1', now });
    expect((await a.clusterView()).version).toBeGreaterThan(first.version);
  });

  it.skipIf(skip)('what attempts hold is read at every view; idle machines are shared and frozen', async () => {
    pair = await open();
    const { a, b } = pair;
    const m = await b.machineRegister({ ...cpuMachine('m1', { cpuMillis: 8000 }), now });
    await b.machineRegister({ ...gpuMachine('g1', 2), now });
    const idle = await a.clusterView();
    const g1 = idle.machines.find((x) => x.name === 'g1')!;
    expect(Object.isFrozen(g1) && Object.isFrozen(g1.gpus) && Object.isFrozen(g1.gpus[0])).toBe(true);
    expect(() => {
      (g1 as { cpuMillisFree: number }).cpuMillisFree -= 1;
    }).toThrow(TypeError);
    // Placed by the other server: its room is gone from the next view (no machine changed).
    const j = await b.jobSubmit({ definition: job([stage('a', { resources: { cpuMillis: 3000, memoryBytes: 2 ** 28, gpu: null } })]), source: null, now });
    const s = (await b.jobGet({ jobId: j.id }))!.stages[0]!;
    const r = await b.planApply({
      plan: { placements: [{ stageId: s.id, machineId: m.id, gpuIndices: [], cpuMillis: 3000, memoryBytes: s.definition.resources.memoryBytes }], pending: [] },
      now,
      leaseMs: 10_000,
    });
    expect(r.applied).toHaveLength(1);
    const busy = await a.clusterView();
    expect(busy.version).toBe(idle.version);
    const m1 = busy.machines.find((x) => x.name === 'm1')!;
    expect(m1.cpuMillisFree).toBe(5000);
    expect(m1.heldAttempts).toBe(1);
    expect(Object.isFrozen(m1)).toBe(false);
    // The idle GPU machine is the same object as before: nothing made anew for it.
    expect(busy.machines.find((x) => x.name === 'g1')).toBe(g1);
  });
});
