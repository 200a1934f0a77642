import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { cpuMachine, job, placeAll, stage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { failUpdatesWhen } from '../../../test/support/update-triggers.js';

/**
 * A report's items on PostgreSQL run without savepoints first (docs/throughput.md, "Savepoints only
 * when needed"): these are the cases where that must still answer each item alone. The faults are
 * triggers, as in report-verbs.test.ts for SQLite.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const now = 1_700_000_000_000;
const done = { exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] };
const statements = countStatements();

describe.skipIf(missing !== null)(`a report's items on PostgreSQL${missing ? ` (skipped: ${missing})` : ''}`, () => {
  let store: KyselyStore;
  beforeEach(async () => {
    store = await freshPostgresStore();
  });
  afterEach(async () => {
    await store.close();
  });
  /** Raises 'boom' on an update of `table` when `when` holds for the new row. */
  const boom = (table: 'attempts' | 'stages', when: string) => failUpdatesWhen(store, true, table, when);

  /** A report acknowledging every attempt placed, each before its spawn. */
  const ackAll = (machineId: string, placed: { id: string; token: number }[], onItemError?: (attemptId: string) => void) =>
    store.machineReport({
      machineId,
      started: placed.map((a) => ({ attemptId: a.id, token: a.token, pid: null })),
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
      ...(onItemError ? { onItemError } : {}),
    });

  it('the usual report sends no savepoint, and runs once', async () => {
    const { m, placed } = await placeAll(store, ['x', 'y'], now);
    statements.reset();
    const r = await ackAll(m.id, placed);
    expect(r.started.map((s) => s.result)).toEqual(['ok', 'ok']);
    const c = statements.snapshot();
    expect(c.byKind.get('SAVEPOINT') ?? 0).toBe(0);
    expect(c.byKind.get('START')).toBe(1);
    expect(store.carefulRuns).toBe(0);
  });

  it('a stale item changes nothing and needs no second run; the others count', async () => {
    const { m, j, placed } = await placeAll(store, ['x', 'y'], now);
    const [x, y] = [placed[0]!, placed[1]!];
    const r = await store.machineReport({
      machineId: m.id,
      started: [
        { attemptId: x.id, token: x.token + 1, pid: null },
        { attemptId: y.id, token: y.token, pid: null },
      ],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    expect(r.started[0]).toMatchObject({ result: 'stale', message: expect.stringMatching(/token/) });
    expect(r.started[1]!.result).toBe('ok');
    expect(store.carefulRuns).toBe(0);
    const stages = (await store.jobGet({ jobId: j.id }))!.stages;
    expect(stages.find((s) => s.name === 'x')!.attempts[0]!.state).toBe('scheduled');
    expect(stages.find((s) => s.name === 'y')!.attempts[0]!.state).toBe('running');
  });

  it('an item the database refuses (which aborts the transaction) is refused alone, the report run again with savepoints', async () => {
    const { m, j, placed } = await placeAll(store, ['x', 'y'], now);
    const [x, y] = [placed[0]!, placed[1]!];
    await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: x.id, token: x.token, pid: null }],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    await boom('attempts', 'new.exit_code = 77');
    const errors: string[] = [];
    const r = await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: y.id, token: y.token, pid: null }],
      completed: [{ ...done, attemptId: x.id, token: x.token, exitCode: 77 }],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
      onItemError: (id) => errors.push(id),
    });
    expect(r.started[0]!.result).toBe('ok');
    expect(r.completed[0]).toMatchObject({ result: 'refused', message: expect.stringMatching(/boom/) });
    expect(errors).toEqual([x.id]);
    expect(store.carefulRuns).toBe(1);
    const stages = (await store.jobGet({ jobId: j.id }))!.stages;
    expect(stages.find((s) => s.name === 'y')!.state).toBe('running');
    expect(stages.find((s) => s.name === 'x')!.attempts[0]!.state).toBe('running');
  });

  it('an item that fails after it has written is undone alone, its events too', async () => {
    const { m, j, placed } = await placeAll(store, ['x', 'y'], now);
    const [x, y] = [placed[0]!, placed[1]!];
    await ackAll(m.id, placed);
    // x's outcome writes its attempt, then trips this on its stage's write.
    await boom('stages', `new.name = 'x' and new.state = 'succeeded'`);
    const r = await store.machineReport({
      machineId: m.id,
      started: [],
      completed: [
        { ...done, attemptId: x.id, token: x.token },
        { ...done, attemptId: y.id, token: y.token },
      ],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    expect(r.completed.map((c) => c.result)).toEqual(['refused', 'ok']);
    expect(store.carefulRuns).toBe(1);
    const stages = (await store.jobGet({ jobId: j.id }))!.stages;
    expect(stages.find((s) => s.name === 'x')!.attempts[0]!.state).toBe('running');
    expect(stages.find((s) => s.name === 'y')!.state).toBe('succeeded');
    const events = await store.eventsList({ jobId: j.id, limit: 100 });
    expect(events.filter((e) => e.attemptId === x.id).map((e) => e.type)).toEqual(['attempt:scheduled', 'attempt:running']);
  });

  /** Three jobs of one stage each, placed on one machine: a report's items each alone with their job (batched on a first run). */
  const threeJobs = async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    const jobs = [];
    for (const name of ['x', 'y', 'z']) jobs.push(await store.jobSubmit({ definition: job([stage('a')], { name }), source: null, now }));
    const cluster = await store.schedulerSnapshot({ now, limitPerShape: 10 });
    const plan = {
      placements: cluster.queue.map((q) => ({ stageId: q.stageId, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 })),
      pending: [],
    };
    const placed = (await store.planApply({ plan, now, leaseMs: 10_000 })).applied;
    return { m, jobs, placed: jobs.map((j) => placed.find((a) => a.jobId === j.id)!) };
  };
  const updatesOf = (table: string) => [...statements.snapshot().byText].filter(([t]) => t.startsWith(`update "${table}"`)).reduce((n, [, c]) => n + c, 0);

  it("a report's plain acknowledgements go in one statement per table (their jobs' states too), and its outcomes read their jobs' stages in one", async () => {
    const { m, jobs, placed } = await threeJobs();
    statements.reset();
    const r = await ackAll(m.id, placed);
    expect(r.started.map((s) => s.result)).toEqual(['ok', 'ok', 'ok']);
    expect(updatesOf('attempts')).toBe(1);
    expect(updatesOf('stages')).toBe(1);
    // The three jobs move from scheduled to running in one guarded update, each with its event (below).
    expect(updatesOf('jobs')).toBe(1);
    for (const j of jobs) {
      const got = (await store.jobGet({ jobId: j.id }))!;
      expect(got.state).toBe('running');
      expect(got.stages[0]!.state).toBe('running');
      expect(got.stages[0]!.attempts[0]!.state).toBe('running');
      const events = await store.eventsList({ jobId: j.id, limit: 100 });
      expect(events.filter((e) => e.type === 'attempt:running')).toHaveLength(1);
      expect(events.filter((e) => e.type === 'job:running')).toHaveLength(1);
    }
    statements.reset();
    const again = await store.machineReport({
      machineId: m.id,
      started: [],
      completed: placed.map((a) => ({ ...done, attemptId: a.id, token: a.token })),
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    expect(again.completed.map((c) => c.result)).toEqual(['ok', 'ok', 'ok']);
    const reads = [...statements.snapshot().byText].filter(([t]) => t.startsWith('select "stages"."job_id"'));
    expect(reads.map(([, n]) => n)).toEqual([1]);
    for (const j of jobs) expect((await store.jobGet({ jobId: j.id }))!.state).toBe('succeeded');
    expect(store.carefulRuns).toBe(0);
  });

  it('a batched acknowledgement the database refuses sends the report round again, each item alone: the others start', async () => {
    const { m, jobs, placed } = await threeJobs();
    const [, y] = placed;
    await boom('attempts', `new.id = '${y!.id}' and new.state = 'running'`);
    const errors: string[] = [];
    const r = await ackAll(m.id, placed, (id) => errors.push(id));
    expect(r.started.map((s) => s.result)).toEqual(['ok', 'refused', 'ok']);
    expect(errors).toEqual([y!.id]);
    expect(store.carefulRuns).toBe(1);
    const states = await Promise.all(jobs.map(async (j) => (await store.jobGet({ jobId: j.id }))!.stages[0]!.state));
    expect(states).toEqual(['running', 'scheduled', 'running']);
  });
});
