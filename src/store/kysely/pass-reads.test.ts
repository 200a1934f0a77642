import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { schedulerPass } from '../../server/scheduler-pass.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, reportStarted, reportSucceeded, stage } from '../conformance/fixtures.js';
import { clusterVersion } from './cluster-view.js';
import type { KyselyStore } from './kysely-store.js';
import { machineUsage, usageOf } from './machine-usage.js';
import { passReadRows } from './pass-reads.js';
import { preemptionOf, preemptionView, schedulerTeams, teamsWithoutUsage } from './team-verbs.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();

/** The five reads' own texts, as each is sent alone. */
const ALONE = [
  /^with recursive s\(shape\)/,
  /^select count\(\*\) \+ coalesce/,
  /^select "machine_id", "cpu_millis"/,
  /^select \* from "teams"/,
  /^select "attempts"\."id", "attempts"\."token"/,
];

describe.skipIf(pgMissing)("a pass's reads in one round trip (PostgreSQL)", () => {
  let store: KyselyStore;
  const now = 1_700_000_000_000;
  const clock = { now: () => now };
  beforeEach(async () => {
    store = await freshPostgresStore('pass_reads');
  });
  afterEach(async () => {
    await store?.close();
  });

  const sent = () => [...statements.snapshot().byText];
  /** The five reads' texts sent alone (the walk of the shapes is also how the text of all five begins: its count is the rest's). */
  const alone = () =>
    sent()
      .flatMap(([text, n]) =>
        ALONE.some((re) => re.test(text)) ? [[text.slice(0, 30), text.startsWith('with recursive') ? n - statements.snapshot().multi : n]] : [],
      )
      .filter(([, n]) => n !== 0);

  it('reads in one statement what the five reads read alone, in the same transaction, constants written in', async () => {
    await store.teamPut({ name: 'vision', weight: 2, quota: { cpuMillis: 8000 }, create: true, now });
    await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 4000 }), now });
    await store.machineRegister({ ...cpuMachine('m2', { cpuMillis: 4000 }), now });
    // Running: one preemptible attempt and one not (the view lists only the first), then a stage left waiting.
    await store.jobSubmit({ definition: job([stage('p', { preemptible: true })], { team: 'vision' }), source: null, now });
    await store.jobSubmit({ definition: job([stage('q')]), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    await store.jobSubmit({
      definition: job([stage('w', { resources: { ...stage('x').resources, cpuMillis: 64_000 } })], { name: "o'brien" }),
      source: null,
      now,
    });

    // Alone (the loop's pass): the same rows, in a transaction of their own, which leaves none open.
    const alone = await passReadRows(store.db, true);
    await store.db.transaction().execute(async (trx) => {
      const r = await passReadRows(trx);
      expect(alone).toEqual(r);
      expect(r.shapes.length).toBe(1);
      expect(r.cluster?.version).toBe(Number((await clusterVersion.first(trx))?.version));
      expect(usageOf(r.cluster!.held)).toEqual(await machineUsage(trx));
      expect([...usageOf(r.cluster!.held).values()].reduce((n, u) => n + u.attempts, 0)).toBe(2);
      expect(teamsWithoutUsage(r.teams)).toEqual(await schedulerTeams(trx, false));
      const running = preemptionOf(r.preemptable);
      expect(running).toEqual(await preemptionView(trx));
      expect(running.map((a) => [a.stageName, a.team, a.preemptible])).toEqual([['p', 'vision', true]]);
    });
  });

  it('with nothing ready it reads only the shapes and the teams: no machine or held attempt', async () => {
    await store.machineRegister({ ...cpuMachine('m1'), now });
    await store.db.transaction().execute(async (trx) => {
      const r = await passReadRows(trx);
      expect(r).toEqual({ shapes: [], cluster: null, teams: [], preemptable: [] });
    });
  });

  it("the loop's pass sends its five reads as one text, in a transaction of their own, and places as before", async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b')]), source: null, now });
    statements.reset();
    const r = await schedulerPass(store.placementSource(), clock, { leaseMs: 10_000 });
    expect(r.placed).toBe(1);
    expect([statements.snapshot().multi, statements.snapshot().statements - statements.snapshot().total]).toEqual([1, 6]);
    // Only the plan's own read of what its machine holds (planApply's re-check, in its transaction), the same text up to where the counter cuts it.
    expect(alone()).toEqual([['select "machine_id", "cpu_mill', 1]]);
    expect((await store.machineAssignments({ machineId: m.id })).length).toBe(1);
    expect((await store.jobGet({ jobId: j.id }))!.stages.map((s) => s.state).sort()).toEqual(['ready', 'scheduled']);
    // A second source, a second pass: read anew, nothing placed where there is no room.
    expect((await schedulerPass(store.placementSource(), clock, { leaseMs: 10_000 })).placed).toBe(0);
  });

  it("a pass before a commit sends its five reads as one statement, its events and messages with the report's, and places as before", async () => {
    store.placeBeforeCommit(
      (source) => schedulerPass(source, clock, { leaseMs: 10_000 }).then(() => {}),
      (err) => {
        throw err;
      },
    );
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const [a] = await store.machineAssignments({ machineId: m.id });
    await reportStarted(store, { machineId: m.id, attempt: a!, now });
    statements.reset();
    // Its outcome readies b and frees the room: the pass before that commit places b.
    await reportSucceeded(store, { machineId: m.id, attempt: a!, now });
    expect(statements.snapshot().multi).toBe(1);
    expect(alone()).toEqual([]);
    // What the pass's writes collected went with the report's: one statement inserts the outbox rows and the events (the events' insert
    // takes the append lock itself; docs/replicas.md, "The outbox and the relay"), with no lock, events or outbox statement of its own.
    const count = (re: RegExp) => sent().reduce((n, [text, k]) => n + (re.test(text) ? k : 0), 0);
    expect([
      count(/^select pg_advisory_xact_lock/),
      count(/^insert into "events"/),
      count(/^insert into "outbox"/),
      // (The counter keys a text by its first 140 characters: the outbox's part opens the statement.)
      count(/^with o as \(insert into "outbox"/),
    ]).toEqual([0, 0, 0, 1]);
    expect((await store.jobGet({ jobId: j.id }))!.stages.map((s) => [s.name, s.state])).toEqual([
      ['a', 'succeeded'],
      ['b', 'scheduled'],
    ]);
    // The pass's event was written, after the report's.
    const events = (await store.db.selectFrom('events').select(['type', 'stage_name']).where('job_id', '=', j.id).orderBy('seq').execute()).slice(-3);
    expect(events.map((e) => [e.type, e.stage_name])).toEqual([
      ['stage:succeeded', 'a'],
      ['stage:ready', 'b'],
      ['attempt:scheduled', 'b'],
    ]);
  });
});
