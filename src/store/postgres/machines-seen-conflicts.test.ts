import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

describe.skipIf(pgMissing)("the liveness loop's write beside other writers of its rows (PostgreSQL)", () => {
  let store: KyselyStore;
  const t0 = 1_700_000_000_000;
  beforeEach(async () => {
    store = await freshPostgresStore('seen_conflicts');
  });
  afterEach(async () => {
    await store?.close();
  });

  const heartbeatAt = async (id: string) =>
    Number((await store.db.selectFrom('machines').select('last_heartbeat_at').where('id', '=', id).executeTakeFirstOrThrow()).last_heartbeat_at);

  it('waits for a row another transaction writes, and is not refused: each row ends at the latest time, never moved back', async () => {
    const a = await store.machineRegister({ ...cpuMachine('a'), now: t0 });
    const b = await store.machineRegister({ ...cpuMachine('b'), now: t0 });
    statements.reset();
    // Another writer of row a (a heartbeat written directly, the reaper), open while the flush runs.
    let flushed: Promise<number> | undefined;
    await store.db
      .transaction()
      .setIsolationLevel('serializable')
      .execute(async (trx) => {
        await sql`update machines set last_heartbeat_at = ${t0 + 3000} where id = ${a.id}`.execute(trx);
        flushed = store.machinesSeen({
          seen: [
            { machineId: a.id, at: t0 + 2000 },
            { machineId: b.id, at: t0 + 2000 },
          ],
          now: t0 + 2000,
        });
        // The flush is blocked on row a's lock until this commits.
        await new Promise((r) => setTimeout(r, 200));
      });
    // Row a's later time stands (the guard, checked again on the committed row); row b moved.
    expect(await flushed).toBe(1);
    expect(statements.snapshot().conflicts).toBe(0);
    expect(await heartbeatAt(a.id)).toBe(t0 + 3000);
    expect(await heartbeatAt(b.id)).toBe(t0 + 2000);
  });
});
