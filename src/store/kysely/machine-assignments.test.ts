/**
 * What a report's answer waits for after its commit (agent-routes.ts): the assignments it carries,
 * read by machineAssignments. Counted on PostgreSQL, where each read is a round trip; what the
 * assignments hold is the conformance suites' (start-on-placement, rerun, gang outputs).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { schedulerPass } from '../../server/scheduler-pass.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, reportStarted, stage } from '../conformance/fixtures.js';
import type { KyselyStore } from './kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

describe.skipIf(pgMissing)("a report's assignments after its commit (PostgreSQL)", () => {
  let store: KyselyStore;
  const now = 1_700_000_000_000;
  const clock = { now: () => now };
  beforeEach(async () => {
    store = await freshPostgresStore('assignments');
  });
  afterEach(async () => {
    await store?.close();
  });

  it("reads a stage started at placement, and its upstream's outputs with their files, in three statements", async () => {
    store.placeBeforeCommit(
      (source) => schedulerPass(source, clock, { leaseMs: 10_000 }).then(() => {}),
      (err) => {
        throw err;
      },
    );
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const [a] = await store.machineAssignments({ machineId: m.id });
    await reportStarted(store, { machineId: m.id, attempt: a!, now });
    // Its outcome readies b and frees the room: the pass before the commit places b, started.
    const end = { kind: 'exited' as const, detail: null };
    const r = await store.machineReport({
      machineId: m.id,
      started: [],
      completed: [{ attemptId: a!.attemptId, token: a!.token, exitCode: 0, signal: null, end, outputs: [] }],
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
      startOnPlacement: true,
    });
    expect(r.startedOnPlacement).toHaveLength(1);
    statements.reset();
    const [b] = await store.machineAssignments({ machineId: m.id, started: r.startedOnPlacement! });
    expect(b).toMatchObject({ stageName: 'b', started: true, inputs: [{ stage: 'a', attemptId: a!.attemptId, files: [] }] });
    // The attempts started here and those placed and not started (sent together), then the
    // upstream stages' committed outputs joined with their files: not a fourth read for the files.
    const texts = [...statements.snapshot().byText.keys()];
    expect(statements.snapshot().total).toBe(3);
    expect(texts.filter((t) => /^select "stage_id", "path"/.test(t))).toEqual([]);
  });
});
