import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, freshSchema, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { dropPostgresSchema, openPostgresStore } from './open-postgres-store.js';

/**
 * A fleet joining at once (docs/throughput.md, "Registering a fleet"): a machine joining under a
 * name never seen is inserted without reading the machines' or the tokens' indexes first, so
 * concurrent joins do not form read/write cycles with each other. Before, 2,500 agents joining
 * two replicas 32 at a time had about one join in two refused and run again (2,400 refusals in the
 * servers' logs), and past a few thousand, beside the fleet's heartbeats, joins took minutes.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const JOINS = 200;
const AT_ONCE = 32;

describe.skipIf(missing !== null)('machines joining at once (postgres)', () => {
  let store: KyselyStore | undefined;
  let schema = '';
  afterEach(async () => {
    await store?.close();
    await dropPostgresSchema(POSTGRES_URL, schema);
  });

  it(`joins ${JOINS} new machines ${AT_ONCE} at a time with few refusals, each with its own credential`, async () => {
    schema = freshSchema('join');
    store = await openPostgresStore(POSTGRES_URL, { schema, poolSize: AT_ONCE });
    const s = store;
    const now = Date.now();
    const counter = countStatements();
    const names = Array.from({ length: JOINS }, (_, i) => `join-${i}`);
    const queue = [...names];
    const joined: { id: string; name: string }[] = [];
    await Promise.all(
      Array.from({ length: AT_ONCE }, async () => {
        for (let name = queue.shift(); name; name = queue.shift()) {
          const m = await s.machineRegister({ ...cpuMachine(name), now, credential: { id: `tok-${name}`, hash: `hash-${name}` } });
          joined.push({ id: m.id, name: m.name });
        }
      }),
    );
    const conflicts = counter.snapshot().conflicts;
    // The counter saw the joins' statements (a counter that saw none would count no conflict either).
    expect(counter.snapshot().total).toBeGreaterThan(JOINS);

    expect(new Set(joined.map((m) => m.name))).toEqual(new Set(names));
    expect(new Set(joined.map((m) => m.id)).size).toBe(JOINS);
    for (const m of joined.slice(0, 5)) expect((await s.tokenByHash({ hash: `hash-${m.name}` }))?.machineId).toBe(m.id);
    // One join in two was refused and run again before; a few in a hundred may still meet another's read.
    expect(conflicts).toBeLessThan(JOINS / 10);

    // A name taken by a live machine: read first, as before, and refused to a join token.
    await expect(s.machineRegister({ ...cpuMachine('join-0'), now: now + 1, credential: { id: 'tok-join-0b', hash: 'hash-join-0b' } })).rejects.toThrow(
      /registered and its agent is alive/,
    );
  });
});
