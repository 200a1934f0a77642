import SQLite from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { failUpdatesWhen } from '../../../test/support/update-triggers.js';
import { placeAll } from '../conformance/fixtures.js';
import { openSqliteStore } from '../sqlite/open-sqlite-store.js';
import { sqliteStoreForTests } from '../sqlite/sqlite-store-for-tests.js';
import type { KyselyStore } from './kysely-store.js';

const now = 1_700_000_000_000;

describe('machineReport', () => {
  let store: KyselyStore;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('an item that fails for another reason than staleness is refused alone; the rest of the report counts', async () => {
    const { m, j, placed } = await placeAll(store, ['x', 'y'], now);
    const [x, y] = placed;
    await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: x!.id, token: x!.token, pid: null }],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    // A fault only this outcome trips (a bug, a constraint): here, a trigger.
    await failUpdatesWhen(store, false, 'attempts', 'new.exit_code = 77');
    const errors: string[] = [];
    const r = await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: y!.id, token: y!.token, pid: null }],
      completed: [{ attemptId: x!.id, token: x!.token, exitCode: 77, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] }],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
      onItemError: (id) => errors.push(id),
    });
    expect(r.started[0]!.result).toBe('ok');
    expect(r.completed[0]).toMatchObject({ result: 'refused', message: expect.stringMatching(/boom/) });
    expect(errors).toEqual([x!.id]);
    const stages = (await store.jobGet({ jobId: j.id }))!.stages;
    expect(stages.find((s) => s.name === 'y')!.state).toBe('running');
    expect(stages.find((s) => s.name === 'x')!.attempts[0]!.state).toBe('running');
  });

  it('an item that fails after it has written is undone alone too (the report runs again with savepoints)', async () => {
    const { m, j, placed } = await placeAll(store, ['x', 'y'], now);
    const [x, y] = placed;
    await store.machineReport({
      machineId: m.id,
      started: [
        { attemptId: x!.id, token: x!.token, pid: null },
        { attemptId: y!.id, token: y!.token, pid: null },
      ],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    // x's outcome writes its attempt, then trips this on its stage's write: a fault after a write.
    await failUpdatesWhen(store, false, 'stages', `new.name = 'x' and new.state = 'succeeded'`);
    const errors: string[] = [];
    const done = { token: 0, exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] };
    const r = await store.machineReport({
      machineId: m.id,
      started: [],
      completed: [
        { ...done, attemptId: x!.id, token: x!.token },
        { ...done, attemptId: y!.id, token: y!.token },
      ],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
      onItemError: (id) => errors.push(id),
    });
    expect(r.completed.map((c) => c.result)).toEqual(['refused', 'ok']);
    expect(errors).toEqual([x!.id]);
    const stages = (await store.jobGet({ jobId: j.id }))!.stages;
    // x's attempt write was undone with the rest of its item; y's outcome stands.
    expect(stages.find((s) => s.name === 'x')!.attempts[0]!.state).toBe('running');
    expect(stages.find((s) => s.name === 'y')!.state).toBe('succeeded');
    const events = await store.eventsList({ jobId: j.id, limit: 100 });
    expect(events.filter((e) => e.attemptId === x!.id).map((e) => e.type)).toEqual(['attempt:scheduled', 'attempt:running']);
  });

  it('items of one job in one report each see the job as the earlier items left it', async () => {
    // The report reads each attempt's job state with it; an item after another of the same job must not act on that read.
    const { m, j, placed } = await placeAll(store, ['x', 'y'], now);
    const [x, y] = [placed[0]!, placed[1]!];
    const report = (started: (typeof x)[], completed: (typeof x)[]) =>
      store.machineReport({
        machineId: m.id,
        started: started.map((a) => ({ attemptId: a.id, token: a.token, pid: null })),
        completed: completed.map((a) => ({
          attemptId: a.id,
          token: a.token,
          exitCode: 0,
          signal: null,
          end: { kind: 'exited' as const, detail: null },
          outputs: [],
        })),
        now,
        leaseMs: 10_000,
        jitter: () => 0,
      });
    await report([y], []);
    expect((await store.jobGet({ jobId: j.id }))!.state).toBe('running');
    const second = await report([x, x], [y]);
    expect(second.started.map((s) => s.result)).toEqual(['ok', 'duplicate']);
    expect(second.completed[0]).toMatchObject({ result: 'ok', jobState: 'running' });
    const third = await report([], [x]);
    expect(third.completed[0]).toMatchObject({ result: 'ok', jobState: 'succeeded' });
    const jobEvents = (await store.eventsList({ jobId: j.id, limit: 100 })).filter((e) => e.type.startsWith('job:')).map((e) => e.type);
    expect(jobEvents).toEqual(['job:submitted', 'job:queued', 'job:scheduled', 'job:running', 'job:succeeded']);
  });

  it('a stale item changes nothing and needs no second run', async () => {
    let begins = 0;
    const store = sqliteStoreForTests(new SQLite(':memory:'), { direct: true, log: (q) => void (q === 'begin' && begins++) });
    await store.migrate();
    const { m, j, placed } = await placeAll(store, ['x'], now);
    const [x] = placed;
    begins = 0;
    const r = await store.machineReport({
      machineId: m.id,
      started: [{ attemptId: x!.id, token: x!.token + 1, pid: null }],
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0,
    });
    expect(r.started[0]).toMatchObject({ result: 'stale', message: expect.stringMatching(/token/) });
    expect(begins).toBe(1);
    expect((await store.jobGet({ jobId: j.id }))!.stages[0]!.attempts[0]!.state).toBe('scheduled');
    await store.close();
  });
});
