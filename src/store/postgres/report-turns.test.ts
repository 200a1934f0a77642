import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { schedulerPass } from '../../server/scheduler-pass.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, stage } from '../conformance/fixtures.js';
import type { KyselyStore } from '../kysely/kysely-store.js';

/**
 * One machine's reports on PostgreSQL run their transactions in turns (kysely/machine-turns.ts):
 * an agent with two reports in flight no longer has them refused for conflicting with each other
 * (docs/throughput.md, "A machine's reports in turns"). Before, each pair read the machine's row and
 * its attempts while the other's pass placed there, and one in three transactions ran again.
 */
const missing = await serviceMissing('PostgreSQL', POSTGRES_URL);
const now = 1_700_000_000_000;
const clock = { now: () => now };
const statements = countStatements();
const exited = { exitCode: 0, signal: null, end: { kind: 'exited' as const, detail: null }, outputs: [] };

describe.skipIf(missing !== null)(`a machine's reports in turns (postgres)${missing ? ` (skipped: ${missing})` : ''}`, () => {
  let store: KyselyStore;
  const errors: unknown[] = [];
  beforeEach(async () => {
    store = await freshPostgresStore('turns');
    errors.length = 0;
  });
  afterEach(async () => {
    await store.close();
  });

  const report = (
    machineId: string,
    p: { started?: { attemptId: string; token: number }[]; completed?: { attemptId: string; token: number }[] },
    signal?: AbortSignal,
  ) =>
    store.machineReport({
      machineId,
      started: (p.started ?? []).map((a) => ({ attemptId: a.attemptId, token: a.token, pid: null })),
      completed: (p.completed ?? []).map((a) => ({ attemptId: a.attemptId, token: a.token, ...exited })),
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
      ...(signal ? { signal } : {}),
    });

  it('two reports of one machine sent at once, round after round, each placing the next stages before its commit: every one answered ok, none refused and run again', async () => {
    store.placeBeforeCommit(
      (source) => schedulerPass(source, clock, { leaseMs: 10_000 }).then(() => {}),
      (err) => errors.push(err),
    );
    const CHAINS = 16;
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: CHAINS * 1000, memoryBytes: CHAINS * 2 ** 30 }), now });
    const chain = job([stage('a'), stage('b', { needs: ['a'] }), stage('c', { needs: ['b'] }), stage('d', { needs: ['c'] })]);
    for (let i = 0; i < CHAINS; i++) await store.jobSubmit({ definition: chain, source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    statements.reset();
    let outcomes = 0;
    for (let round = 0; round < 4; round++) {
      const placed = await store.machineAssignments({ machineId: m.id });
      expect(placed).toHaveLength(CHAINS);
      // Acknowledged in two reports at once, then their outcomes in two more, as an agent with two in flight sends them.
      const halves = [placed.slice(0, CHAINS / 2), placed.slice(CHAINS / 2)];
      const acks = await Promise.all(halves.map((h) => report(m.id, { started: h })));
      expect(acks.flatMap((r) => r.started.map((s) => s.result))).toEqual(Array(CHAINS).fill('ok'));
      const ends = await Promise.all(halves.map((h) => report(m.id, { completed: h })));
      expect(ends.flatMap((r) => r.completed.map((s) => s.result))).toEqual(Array(CHAINS).fill('ok'));
      outcomes += CHAINS;
    }
    expect(outcomes).toBe(4 * CHAINS);
    expect(errors).toEqual([]);
    // The counter saw the reports' transactions (one that saw none would count no conflict either).
    expect(statements.snapshot().byKind.get('COMMIT')).toBeGreaterThanOrEqual(16);
    expect([...statements.snapshot().conflictsByText]).toEqual([]);
    expect(statements.snapshot().conflicts).toBe(0);
  });

  /** m1 running x, y and z (one job of three independent stages), and the next report's pass before its commit held until `release`. */
  async function threeRunningAndAHeldPass() {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    const j = await store.jobSubmit({ definition: job([stage('x'), stage('y'), stage('z')]), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const placed = await store.machineAssignments({ machineId: m.id });
    expect(placed.map((a) => a.stageName).sort()).toEqual(['x', 'y', 'z']);
    expect((await report(m.id, { started: placed })).started.map((r) => r.result)).toEqual(['ok', 'ok', 'ok']);
    const [x, y, z] = ['x', 'y', 'z'].map((n) => placed.find((a) => a.stageName === n)!);
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inPass = new Promise<void>((r) => (entered = r));
    let passes = 0;
    // An outcome frees room, so its transaction runs the pass before its commit: the first one's holds there.
    store.placeBeforeCommit(
      async () => {
        if (passes++ > 0) return;
        entered();
        await held;
      },
      (err) => errors.push(err),
    );
    const stageStates = async () => Object.fromEntries((await store.jobGet({ jobId: j.id }))!.stages.map((s) => [s.name, s.state]));
    return { m, x: x!, y: y!, z: z!, release, inPass, stageStates };
  }

  it("a machine's second report begins its transaction once the first has committed, not before; another machine's does not wait", async () => {
    const { m, x, y, release, inPass, stageStates } = await threeRunningAndAHeldPass();
    const m2 = await store.machineRegister({ ...cpuMachine('m2'), now });
    statements.reset();
    const order: string[] = [];
    const first = report(m.id, { completed: [x] }).then((r) => (order.push('first'), r));
    await inPass;
    const second = report(m.id, { completed: [y] }).then((r) => (order.push('second'), r));
    // Another machine's report (about m1's attempt: stale to it) runs and commits while m1's first is held.
    const other = await report(m2.id, { started: [x] });
    order.push('other machine');
    expect(other.started[0]).toMatchObject({ result: 'stale' });
    expect(await stageStates()).toEqual({ x: 'running', y: 'running', z: 'running' });
    release();
    expect((await first).completed[0]!.result).toBe('ok');
    expect((await second).completed[0]!.result).toBe('ok');
    // Side by side, the second either committed first or conflicted with the first and ran again after it.
    expect(order).toEqual(['other machine', 'first', 'second']);
    expect(statements.snapshot().conflicts).toBe(0);
    expect(await stageStates()).toEqual({ x: 'succeeded', y: 'succeeded', z: 'running' });
    expect(errors).toEqual([]);
  });

  it("a report given up (its request closed) while it waits for the machine's earlier one runs nothing; the next one still runs", async () => {
    const { m, x, y, z, release, inPass, stageStates } = await threeRunningAndAHeldPass();
    const first = report(m.id, { completed: [x] });
    await inPass;
    const gone = new AbortController();
    const abandoned = report(m.id, { completed: [y] }, gone.signal);
    const next = report(m.id, { completed: [z] });
    gone.abort(new Error('the agent timed out'));
    await expect(abandoned).rejects.toThrow('the agent timed out');
    release();
    expect((await first).completed[0]!.result).toBe('ok');
    expect((await next).completed[0]!.result).toBe('ok');
    // y's outcome was never written: the agent sends it again, and it counts then.
    expect(await stageStates()).toEqual({ x: 'succeeded', y: 'running', z: 'succeeded' });
    expect((await report(m.id, { completed: [y] })).completed[0]!.result).toBe('ok');
    expect(errors).toEqual([]);
  });
});
