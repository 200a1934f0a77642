import SQLite from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { schedulerPass } from '../../server/scheduler-pass.js';
import type { Plan } from '../../scheduler/snapshot.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { countStatements } from '../../../test/support/statement-counter.js';
import { cpuMachine, job, reportStarted, reportSucceeded, stage } from '../conformance/fixtures.js';
import type { OutboxMessage } from '../records.js';
import type { Database } from '../schema.js';
import { KyselyStore } from './kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);
/** What PostgreSQL is sent by this file's stores: its COMMITs count the transactions that committed. */
const statements = countStatements();

/** What a read of the attempts that hold room begins with (machine-usage.ts): every machine's, or the named machines'. */
const HELD_READ = /^select "machine_id", "cpu_millis", "memory_bytes", "gpu_indices", "gpu_milli", "gpu_memory_bytes" from "attempts"/;

/** Each store, with how many transactions committed and how many reads of held attempts it sent since the last `reset`. */
/** `submitPlaces`: whether a submit's own transaction places (SQLite); with several writers a submit leaves it to the loop (kysely-store.ts, tx's `place`). */
const stores: {
  name: string;
  skip: string | null;
  submitPlaces: boolean;
  open: () => Promise<{ store: KyselyStore; commits: () => number; heldReads: () => number; reset: () => void }>;
}[] = [
  {
    name: 'SQLite (one writer: group commit)',
    skip: null,
    submitPlaces: true,
    async open() {
      let commits = 0;
      let heldReads = 0;
      const db = new Kysely<Database>({
        dialect: new SqliteDialect({ database: new SQLite(':memory:') }),
        log: (e) => {
          if (e.level === 'query' && e.query.sql === 'commit') commits++;
          if (e.level === 'query' && HELD_READ.test(e.query.sql)) heldReads++;
        },
      });
      const store = new KyselyStore(db, { dialect: 'sqlite', skipLocked: false, singleWriter: true });
      await store.migrate();
      return { store, commits: () => commits, heldReads: () => heldReads, reset: () => void (commits = heldReads = 0) };
    },
  },
  {
    name: 'PostgreSQL (several writers: SERIALIZABLE, one pass at a time)',
    skip: pgMissing,
    submitPlaces: false,
    async open() {
      const store = await freshPostgresStore('place_in_tx');
      const heldReads = () => [...statements.snapshot().byText].reduce((n, [text, k]) => n + (HELD_READ.test(text) ? k : 0), 0);
      return {
        store,
        commits: () => (statements.snapshot().byKind.get('COMMIT') ?? 0) + statements.snapshot().commitsWithAppend,
        heldReads,
        reset: () => statements.reset(),
      };
    },
  },
];

describe.each(stores)('placement in the transaction that made room: $name', ({ skip, submitPlaces, open }) => {
  let store: KyselyStore;
  let commits: () => number;
  let heldReads: () => number;
  let reset: () => void;
  const now = 1_700_000_000_000;
  const clock = { now: () => now };
  const errors: unknown[] = [];
  beforeEach(async (t) => {
    if (skip) return t.skip();
    ({ store, commits, heldReads, reset } = await open());
    errors.length = 0;
  });
  afterEach(async () => {
    await store?.close();
  });

  const stageStates = async (jobId: string) => Object.fromEntries((await store.jobGet({ jobId }))!.stages.map((s) => [s.name, s.state]));

  it('a submit places what fits (SQLite; PostgreSQL leaves it to the loop), and the outcome that frees room places the next stage, each in its own one commit', async () => {
    expect(
      store.placeBeforeCommit(
        (source) => schedulerPass(source, clock, { leaseMs: 10_000 }).then(() => {}),
        (err) => errors.push(err),
      ),
    ).toBe(true);
    // Room for one stage of 1 CPU at a time.
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    reset();
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    expect(commits()).toBe(1);
    if (!submitPlaces) {
      expect(await stageStates(j.id)).toEqual({ a: 'ready', b: 'pending' });
      await schedulerPass(store, clock, { leaseMs: 10_000 });
    }
    expect(await stageStates(j.id)).toEqual({ a: 'scheduled', b: 'pending' });
    const [a] = await store.machineAssignments({ machineId: m.id });
    await reportStarted(store, { machineId: m.id, attempt: a!, now });
    reset();
    const r = await reportSucceeded(store, { machineId: m.id, attempt: a!, now });
    expect(r.completed[0]!.result).toBe('ok');
    expect(commits()).toBe(1);
    expect(await stageStates(j.id)).toEqual({ a: 'succeeded', b: 'scheduled' });
    expect((await store.machineAssignments({ machineId: m.id })).map((x) => x.stageName)).toEqual(['b']);
    expect(errors).toEqual([]);
  });

  it("a pass's plan takes what its cluster view read the machines hold, until the pass writes: a second plan on the same view is checked against the first's attempts", async () => {
    // Two stages of 1 CPU, then a machine with room for one: its registration frees capacity, and
    // the pass before that commit plans each stage on it from the one view, in two plans.
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b')]), source: null, now });
    const results: { applied: number; skipped: string[] }[] = [];
    store.placeBeforeCommit(
      async (source) => {
        reset();
        const { machines } = await source.clusterView();
        if (machines.length === 0) return;
        const m = machines[0]!;
        const heads = await source.queueHeads({ now, shapes: (await source.readyShapes({ now })).map((s) => ({ shape: s.shape, limit: 10 })) });
        const plan = (stageId: string): Plan => ({
          placements: [{ stageId, machineId: m.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 1 << 20 }],
          pending: [],
        });
        for (const h of heads) {
          const r = await source.planApply({ plan: plan(h.stageId), now, leaseMs: 10_000 });
          results.push({ applied: r.applied.length, skipped: r.skipped.map((x) => x.why) });
        }
      },
      (err) => errors.push(err),
    );
    await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    expect(errors).toEqual([]);
    // In the pass: the view's read; the first plan took it (no read of its own); the second, after that write, read anew and found no room.
    expect(results).toEqual([
      { applied: 1, skipped: [] },
      { applied: 0, skipped: ['machine no longer has room'] },
    ]);
    expect(heldReads()).toBe(2);
    expect(Object.values(await stageStates(j.id)).sort()).toEqual(['ready', 'scheduled']);
  });

  it("the transaction's placement hints are handed over marked handled only where its pass ran to its end (resolved true)", async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 1000 }), now });
    const handed: OutboxMessage[][] = [];
    store.onOutbox((ms) => void handed.push(ms));
    /** What a chain a → b's outcome of a hands over, with the pass answering `answer` (or throwing). */
    const outcomeWith = async (answer: boolean | undefined | 'throw') => {
      store.placeBeforeCommit(
        async (source) => {
          await schedulerPass(source, clock, { leaseMs: 10_000 });
          if (answer === 'throw') throw new Error('pass broke');
          return answer;
        },
        (err) => errors.push(err),
      );
      const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
      await schedulerPass(store, clock, { leaseMs: 10_000 });
      const [a] = (await store.machineAssignments({ machineId: m.id })).filter((x) => x.jobId === j.id);
      await reportStarted(store, { machineId: m.id, attempt: a!, now });
      handed.length = 0;
      await reportSucceeded(store, { machineId: m.id, attempt: a!, now });
      const hints: OutboxMessage[] = handed.flat().filter((x) => x.topic === 'pool:ready' || x.topic === 'capacity:freed');
      expect(hints.map((x) => x.topic).sort()).toEqual(['capacity:freed', 'pool:ready']);
      // Whatever else the commit carried is never marked.
      expect(handed.flat().filter((x) => x.handled && !hints.includes(x))).toEqual([]);
      // Its b, placed or not, out of the way of the next chain (the machine has room for one).
      const [b] = (await store.machineAssignments({ machineId: m.id })).filter((x) => x.jobId === j.id);
      if (b) {
        await reportStarted(store, { machineId: m.id, attempt: b, now });
        store.placeBeforeCommit(
          async () => {},
          (err) => errors.push(err),
        );
        await reportSucceeded(store, { machineId: m.id, attempt: b, now });
      }
      return hints.map((x) => x.handled === true);
    };
    expect(await outcomeWith(true)).toEqual([true, true]);
    expect(await outcomeWith(false)).toEqual([false, false]);
    expect(await outcomeWith(undefined)).toEqual([false, false]);
    expect(await outcomeWith('throw')).toEqual([false, false]);
    // Told of (SQLite's submit ran the throwing pass too).
    expect([...new Set(errors.map((e) => (e as Error).message))]).toEqual(['pass broke']);
  });

  it('a pass that fails is undone alone: the outcome it rode with stands, and the error is told', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1'), now });
    const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const [a] = await store.machineAssignments({ machineId: m.id });
    await reportStarted(store, { machineId: m.id, attempt: a!, now });
    // A pass that places (its writes are in the transaction), then fails.
    store.placeBeforeCommit(
      async (source) => {
        await schedulerPass(source, clock, { leaseMs: 10_000 });
        throw new Error('pass broke');
      },
      (err) => errors.push(err),
    );
    const r = await reportSucceeded(store, { machineId: m.id, attempt: a!, now });
    expect(r.completed[0]!.result).toBe('ok');
    expect(await stageStates(j.id)).toEqual({ a: 'succeeded', b: 'ready' });
    expect(await store.machineAssignments({ machineId: m.id })).toEqual([]);
    expect(errors.map((e) => (e as Error).message)).toEqual(['pass broke']);
  });
});

describe.skipIf(pgMissing !== null)('placement in the transaction on PostgreSQL: one pass at a time', () => {
  const now = 1_700_000_000_000;
  const clock = { now: () => now };
  let store: KyselyStore;
  beforeEach(async () => {
    store = await freshPostgresStore('place_in_tx');
  });
  afterEach(async () => {
    await store.close();
  });

  it("a transaction that finds another's pass running commits without one; the stage it readied waits for the next pass", async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 2000 }), now });
    const x = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name: 'x' }), source: null, now });
    const y = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })], { name: 'y' }), source: null, now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const placed = await store.machineAssignments({ machineId: m.id });
    expect(placed).toHaveLength(2);
    await store.machineReport({
      machineId: m.id,
      started: placed.map((a) => ({ attemptId: a.attemptId, token: a.token, pid: null })),
      completed: [],
      now,
      leaseMs: 10_000,
      jitter: () => 0.5,
    });
    let passes = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inPass = new Promise<void>((r) => (entered = r));
    const errors: unknown[] = [];
    store.placeBeforeCommit(
      async (source) => {
        passes++;
        entered();
        await held;
        await schedulerPass(source, clock, { leaseMs: 10_000 });
      },
      (err) => errors.push(err),
    );
    const end = (jobId: string) => {
      const a = placed.find((p) => p.jobId === jobId)!;
      return reportSucceeded(store, { machineId: m.id, attempt: a, now });
    };
    const handed: OutboxMessage[][] = [];
    store.onOutbox((ms) => void handed.push(ms));
    const first = end(x.id);
    await inPass;
    // The second commits while the first's pass still runs, with no pass of its own: its hints are not handled.
    expect((await end(y.id)).completed[0]!.result).toBe('ok');
    expect(passes).toBe(1);
    const hintsOfY = handed.flat().filter((m) => m.topic === 'pool:ready' || m.topic === 'capacity:freed');
    expect(hintsOfY.map((m) => [m.topic, m.handled === true]).sort()).toEqual([
      ['capacity:freed', false],
      ['pool:ready', false],
    ]);
    const states = async (jobId: string) => Object.fromEntries((await store.jobGet({ jobId }))!.stages.map((s) => [s.name, s.state]));
    expect(await states(y.id)).toEqual({ a: 'succeeded', b: 'ready' });
    release();
    expect((await first).completed[0]!.result).toBe('ok');
    // The first's pass read its own snapshot: y's b, readied by a commit after it began, is not in it
    // (or, if it was, the two conflicted and it ran again): whichever, x's b is placed, and nothing twice.
    expect(await states(x.id)).toEqual({ a: 'succeeded', b: 'scheduled' });
    const after = await store.machineAssignments({ machineId: m.id });
    expect(new Set(after.map((a) => a.attemptId)).size).toBe(after.length);
    expect(errors).toEqual([]);
  });
});
