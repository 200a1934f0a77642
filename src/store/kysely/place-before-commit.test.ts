import SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { schedulerPass } from '../../server/scheduler-pass.js';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import type { Database } from '../schema.js';
import { KyselyStore } from './kysely-store.js';

describe('placement in the transaction that made room (one writer)', () => {
  let store: KyselyStore;
  let commits = 0;
  const now = 1_700_000_000_000;
  const clock = { now: () => now };
  const errors: unknown[] = [];
  beforeEach(async () => {
    const db = new Kysely<Database>({
      dialect: new SqliteDialect({ database: new SQLite(':memory:') }),
      log: (e) => {
        if (e.level === 'query' && e.query.sql === 'commit') commits++;
      },
    });
    store = new KyselyStore(db, { dialect: 'sqlite', skipLocked: false, singleWriter: true });
    await store.migrate();
    errors.length = 0;
  });
  afterEach(async () => {
    await store.close();
  });

  const stageStates = async (jobId: string) => Object.fromEntries((await store.jobGet({ jobId }))!.stages.map((s) => [s.name, s.state]));

  it('a submit places what fits, and the outcome that frees room places the next stage, each in its own one commit', async () => {
    expect(
      store.placeBeforeCommit(
        (source) => schedulerPass(source, clock, { leaseMs: 10_000 }).then(() => {}),
        (err) => errors.push(err),
      ),
    ).toBe(true);
    // Room for one stage of 1 CPU at a time.
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    commits = 0;
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    expect(commits).toBe(1);
    expect(await stageStates(j.id)).toEqual({ a: 'scheduled', b: 'pending' });
    const [a] = await store.machineAssignments({ machineId: m.id });
    await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: a!.attemptId, token: a!.token, pid: null }],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    commits = 0;
    const r = await store.machineReport({
      machineId: m.id,
      started: [],
      completed: [{ attemptId: a!.attemptId, token: a!.token, exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] }],
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    expect(r.completed[0]!.result).toBe('ok');
    expect(commits).toBe(1);
    expect(await stageStates(j.id)).toEqual({ a: 'succeeded', b: 'scheduled' });
    expect((await store.machineAssignments({ machineId: m.id })).map((x) => x.stageName)).toEqual(['b']);
    expect(errors).toEqual([]);
  });

  it('a pass that fails is undone alone: the outcome it rode with stands, and the error is told', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const [a] = await store.machineAssignments({ machineId: m.id });
    await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: a!.attemptId, token: a!.token, pid: null }],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    // A pass that places (its writes are in the transaction), then fails.
    store.placeBeforeCommit(
      async (source) => {
        await schedulerPass(source, clock, { leaseMs: 10_000 });
        throw new Error('pass broke');
      },
      (err) => errors.push(err),
    );
    const r = await store.machineReport({
      machineId: m.id,
      started: [],
      completed: [{ attemptId: a!.attemptId, token: a!.token, exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] }],
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    expect(r.completed[0]!.result).toBe('ok');
    expect(await stageStates(j.id)).toEqual({ a: 'succeeded', b: 'ready' });
    expect(await store.machineAssignments({ machineId: m.id })).toEqual([]);
    expect(errors.map((e) => (e as Error).message)).toEqual(['pass broke']);
  });
});
