import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MachineLifecycle } from '../../autoscale/machine-lifecycle.js';
import { gpuMachine } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { AutoscaledMachinesTable } from '../schema.js';
import type { KyselyStore } from './kysely-store.js';

/**
 * The rows at their end (released and stopped) are kept, one per machine a pool ever started, and
 * every autoscaler pass and GET /v1/autoscale reads them. What holds room on a machine is asked of
 * the attempts only for the rows not at their end: a stopped machine holds nothing, and binding
 * every machine id a pool ever had failed past the database's limit on bound values (SQLite's
 * 32,766), which stopped the autoscaler for good on a pool that had churned that long.
 */
describe('autoscaleRows over a long history', () => {
  let store: KyselyStore;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('reads 33,000 stopped rows with machine ids, and still counts what holds room on the live one', async () => {
    const OLD = 33_000;
    const old = (i: number): AutoscaledMachinesTable => ({
      name: `h100-${i + 1}`,
      pool: 'h100',
      lifecycle: MachineLifecycle.released,
      reason: 'old',
      started_at: now - 1_000_000 + i,
      requested_at: now - 1_000_000 + i,
      provider_id: null,
      joined_at: now - 1_000_000 + i,
      machine_id: `m-old-${i}`,
      draining_at: now - 500_000,
      released_at: now - 500_000,
      stopped_at: now - 500_000,
      fail_reason: null,
      held_for: '[]',
      updated_at: now - 500_000,
    });
    // 500 rows a statement: well under the bound-value limit this test is about.
    for (let i = 0; i < OLD; i += 500)
      await store.db
        .insertInto('autoscaled_machines')
        .values(Array.from({ length: Math.min(500, OLD - i) }, (_, j) => old(i + j)))
        .execute();
    const [live] = await store.autoscaleStart({ pool: 'h100', heldFor: [[]], reason: 'one waits', now });
    await store.autoscaleRequested({ name: live!.name, now });
    const m = await store.machineRegister({ ...gpuMachine(live!.name, 1), now: now + 1000 });

    const rows = await store.autoscaleRows({});
    expect(rows).toHaveLength(OLD + 1);
    expect(rows[0]).toMatchObject({ name: 'h100-1', lifecycle: 'released', attempts: 0, idleSince: null });
    expect(rows.at(-1)).toMatchObject({ name: `h100-${OLD + 1}`, lifecycle: 'ready', machineId: m.id, attempts: 0, idleSince: now + 1000 });
    expect((await store.autoscaleRows({ active: true })).map((r) => r.name)).toEqual([`h100-${OLD + 1}`]);
  });
});
