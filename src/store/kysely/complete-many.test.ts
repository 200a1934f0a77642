import { afterEach, describe, expect, it } from 'vitest';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { setBasedSqliteStore } from '../../../test/support/set-based-sqlite-store.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { failUpdatesWhen, skipUpdatesOf } from '../../../test/support/update-triggers.js';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import type { AttemptCompletion } from '../store.js';
import { DEFAULT_RETRY } from '../../domain/job-definition.js';
import type { KyselyStore } from './kysely-store.js';

/**
 * A report's plain outcomes are written set-based (complete-many.ts): what they leave in the
 * database and in the events must be exactly what the same outcomes leave one by one
 * (attemptComplete), on both stores; a bad item is still answered alone.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const statements = countStatements();
const now = 1_700_000_000_000;
const ok = { signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] };

const dialects = [
  // SQLite writes one row a statement in the server (StoreCapabilities.setBasedWrites): both ways proven here.
  { name: 'sqlite', open: () => openSqliteStore(':memory:'), skip: false },
  { name: 'sqlite, set-based', open: setBasedSqliteStore, skip: false },
  { name: 'postgres', open: () => freshPostgresStore('complete_many'), skip: missing !== null },
] as const;

/** Five jobs whose outcomes move their DAGs each a different way, all placed and started on one machine. */
const SCENARIOS: { name: string; stages: ReturnType<typeof stage>[]; outcome: Omit<AttemptCompletion, 'attemptId' | 'token'> }[] = [
  // a success that readies the next stage
  { name: 'chain', stages: [stage('a'), stage('b', { needs: ['a'] })], outcome: { ...ok, exitCode: 0 } },
  // a success that ends the job
  { name: 'single', stages: [stage('a')], outcome: { ...ok, exitCode: 0, usage: { memoryPeakBytes: 1234, cpuSeconds: 0.5 } } },
  // a failure retried after a backoff
  {
    name: 'retry',
    stages: [stage('a', { retry: { ...DEFAULT_RETRY, maxAttempts: 3, backoff: { initialSeconds: 5, maxSeconds: 10 } } })],
    outcome: { ...ok, exitCode: 1 },
  },
  // a failure for good: the stage after it skipped, the job failed with its reason
  {
    name: 'fail',
    stages: [stage('a', { retry: { ...DEFAULT_RETRY, maxAttempts: 1, backoff: { initialSeconds: 1, maxSeconds: 1 } } }), stage('b', { needs: ['a'] })],
    outcome: { ...ok, exitCode: 2 },
  },
  // its log as the server has it (nothing to mark), and a signal
  {
    name: 'signal',
    stages: [stage('a', { retry: { ...DEFAULT_RETRY, maxAttempts: 1, backoff: { initialSeconds: 1, maxSeconds: 1 } } })],
    outcome: { ...ok, exitCode: null, signal: 'SIGKILL', logBytes: { stdout: 0, stderr: 0 } },
  },
];

async function started(store: KyselyStore, machineId: string, tag: string) {
  const jobs = [];
  for (const s of SCENARIOS) jobs.push(await store.jobSubmit({ definition: job(s.stages, { name: `${s.name}-${tag}` }), source: null, now }));
  const cluster = await store.schedulerSnapshot({ now, limitPerShape: 100 });
  const ours = new Set(jobs.map((j) => j.id));
  const plan = {
    placements: cluster.queue
      .filter((q) => ours.has(q.jobId))
      .map((q) => ({ stageId: q.stageId, machineId, gpuIndices: [], cpuMillis: 100, memoryBytes: 2 ** 20 })),
    pending: [],
  };
  const applied = (await store.planApply({ plan, now, leaseMs: 10_000 })).applied;
  const placed = jobs.map((j) => applied.find((a) => a.jobId === j.id)!);
  await store.machineReport({
    machineId,
    started: placed.map((a) => ({ attemptId: a.id, token: a.token, pid: null })),
    completed: [],
    now,
    leaseMs: 10_000,
    jitter: () => 0.5,
  });
  return { jobs, placed };
}

/** The machine's one report of `placed`'s outcomes, each its scenario's, a second after they started. */
const reportAll = (
  store: KyselyStore,
  machineId: string,
  placed: readonly { id: string; token: number }[],
  more: { onItemError?: (attemptId: string) => void } = {},
) =>
  store.machineReport({
    machineId,
    started: [],
    completed: placed.map((a, i) => ({ ...SCENARIOS[i]!.outcome, attemptId: a.id, token: a.token })),
    now: now + 1000,
    leaseMs: 10_000,
    jitter: () => 0.5,
    ...more,
  });

/** A job as read back, every id it holds replaced by what it names, so that two jobs' histories compare. */
async function history(store: KyselyStore, jobId: string) {
  const got = (await store.jobGet({ jobId }))!;
  const events = await store.eventsList({ jobId, limit: 1000 });
  let text = JSON.stringify({ got, events: events.map((e) => ({ ...e, seq: 0 })) });
  text = text
    .replaceAll(jobId, 'JOB')
    .replace(/"name":"[a-z]+-(one|many)"/g, '"name":"NAME"')
    .replace(/-(one|many)\b/g, '');
  for (const s of got.stages) {
    text = text.replaceAll(s.id, `STAGE-${s.name}`);
    for (const a of s.attempts) text = text.replaceAll(a.id, `ATTEMPT-${s.name}-${a.number}`);
  }
  return JSON.parse(text) as unknown;
}

describe.each(dialects)("a report's outcomes set-based ($name)", ({ name, open, skip }) => {
  let store: KyselyStore;
  afterEach(async () => {
    await store?.close();
  });

  it.skipIf(skip)('leave what the same outcomes leave one by one: stages, attempts, jobs, events', async () => {
    store = await open();
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 64_000 }), now });
    const one = await started(store, m.id, 'one');
    const many = await started(store, m.id, 'many');
    const at = now + 1000;
    for (const [i, a] of one.placed.entries()) {
      await store.attemptComplete({ ...SCENARIOS[i]!.outcome, attemptId: a.id, token: a.token, now: at, jitter: 0.5, machineId: m.id });
    }
    statements.reset();
    const r = await reportAll(store, m.id, many.placed);
    expect(r.completed.map((c) => c.result)).toEqual(SCENARIOS.map(() => 'ok'));
    expect(r.completed.map((c) => c.jobState)).toEqual(['running', 'succeeded', 'queued', 'failed', 'failed']);
    if (name === 'postgres') {
      // Five outcomes, each table written once (the set-based path was taken, not the item-by-item one).
      const updates = (table: string) => [...statements.snapshot().byText].filter(([t]) => t.startsWith(`update "${table}"`)).reduce((n, [, c]) => n + c, 0);
      expect([updates('attempts'), updates('stages'), updates('jobs')]).toEqual([1, 1, 1]);
      expect(store.carefulRuns).toBe(0);
    }
    for (const [i] of SCENARIOS.entries()) {
      expect(await history(store, many.jobs[i]!.id)).toEqual(await history(store, one.jobs[i]!.id));
    }
  });

  it.skipIf(skip)('an attempt its guarded write does not find is answered stale, nothing of it written; the others commit', async () => {
    store = await open();
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 64_000 }), now });
    const { jobs, placed } = await started(store, m.id, 'many');
    const skipped = placed[1]!;
    // The row is passed over by the write, as if it had moved between the report's read and its write.
    await skipUpdatesOf(store, name === 'postgres', 'attempts', skipped.id);
    const r = await reportAll(store, m.id, placed);
    expect(r.completed.map((c) => c.result)).toEqual(['ok', 'stale', 'ok', 'ok', 'ok']);
    expect(r.completed[1]!.message).toMatch(/changed while completing/);
    expect(store.carefulRuns).toBe(0);
    const j = (await store.jobGet({ jobId: jobs[1]!.id }))!;
    expect([j.state, j.stages[0]!.state, j.stages[0]!.attempts[0]!.state]).toEqual(['running', 'running', 'running']);
    const events = await store.eventsList({ jobId: jobs[1]!.id, limit: 100 });
    expect(events.map((e) => e.type)).not.toContain('attempt:succeeded');
    expect((await store.jobGet({ jobId: jobs[0]!.id }))!.stages.map((s) => s.state)).toEqual(['succeeded', 'ready']);
  });

  it.skipIf(skip)('a stage write the database refuses sends the report round again item by item: that outcome is refused alone', async () => {
    store = await open();
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 64_000 }), now });
    const { jobs, placed } = await started(store, m.id, 'many');
    const bad = placed[0]!;
    await failUpdatesWhen(store, name === 'postgres', 'stages', `new.id = '${bad.stageId}' and new.state = 'succeeded'`);
    const errors: string[] = [];
    const r = await reportAll(store, m.id, placed, { onItemError: (id) => errors.push(id) });
    expect(r.completed.map((c) => c.result)).toEqual(['refused', 'ok', 'ok', 'ok', 'ok']);
    expect(errors).toEqual([bad.id]);
    if (name === 'postgres') expect(store.carefulRuns).toBe(1);
    const j = (await store.jobGet({ jobId: jobs[0]!.id }))!;
    expect([j.stages[0]!.state, j.stages[0]!.attempts[0]!.state]).toEqual(['running', 'running']);
    expect((await store.eventsList({ jobId: jobs[0]!.id, limit: 100 })).map((e) => e.type)).not.toContain('attempt:succeeded');
    expect((await store.jobGet({ jobId: jobs[1]!.id }))!.state).toBe('succeeded');
  });
});
