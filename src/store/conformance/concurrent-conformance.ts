import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { StageDetail } from '../records.js';
import type { Store } from '../store.js';
import { cpuMachine, gpuMachine, job, stage } from './fixtures.js';

/**
 * The transaction contract under writers that really run at once (docs/store-contract.md).
 * Each case starts two store calls together and checks what both leave behind, many rounds
 * over, since a race shows only when the two interleave. On SQLite they pass trivially (one
 * writer); on PostgreSQL, READ COMMITTED with the pool's connections, each one failed before its
 * lock or constraint was added.
 */
export function concurrentConformance(adapter: string, open: () => Promise<Store>): void {
  describe(`Store concurrency: ${adapter}`, () => {
    let store: Store;
    const now = 1_700_000_000_000;
    const LEASE = 60_000;
    const ROUNDS = 12;
    beforeEach(async () => {
      store = await open();
    });
    afterEach(async () => {
      await store.close();
    });

    const stageOf = async (jobId: string, name: string): Promise<StageDetail> => (await store.jobGet({ jobId }))!.stages.find((s) => s.name === name)!;
    const place = async (jobId: string, name: string, machineId: string, gpuIndices: number[] = []) => {
      const s = await stageOf(jobId, name);
      return store.planApply({
        plan: {
          placements: [{ stageId: s.id, machineId, gpuIndices, cpuMillis: s.definition.resources.cpuMillis, memoryBytes: s.definition.resources.memoryBytes }],
          pending: [],
        },
        now,
        leaseMs: LEASE,
      });
    };
    const complete = (a: { id: string; token: number }) =>
      store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited' as const, detail: null },
        outputs: [],
        now,
        jitter: 0,
      });

    it('two stages completing at once into a join: the stage needing both is ready, whichever commits last', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 64_000 }), now });
      for (let round = 0; round < ROUNDS; round++) {
        const j = await store.jobSubmit({ definition: job([stage('a'), stage('b'), stage('join', { needs: ['a', 'b'] })]), source: null, now });
        const a = (await place(j.id, 'a', m.id)).applied[0]!;
        const b = (await place(j.id, 'b', m.id)).applied[0]!;
        for (const x of [a, b]) await store.attemptStart({ attemptId: x.id, token: x.token, pid: 1, now, leaseMs: LEASE });
        await Promise.all([complete(a), complete(b)]);
        const after = await store.jobGet({ jobId: j.id });
        expect(after!.stages.map((s) => [s.name, s.state])).toEqual([
          ['a', 'succeeded'],
          ['b', 'succeeded'],
          ['join', 'ready'],
        ]);
        expect(after!.state).toBe('running');
      }
    });

    it('cancel racing start: the job ends canceled and no attempt of it is left running without a kill', async () => {
      const m = await store.machineRegister({ ...cpuMachine('c1', { cpuMillis: 64_000 }), now });
      for (let round = 0; round < ROUNDS; round++) {
        const j = await store.jobSubmit({ definition: job([stage('a'), stage('b', { needs: ['a'] })]), source: null, now });
        const a = (await place(j.id, 'a', m.id)).applied[0]!;
        const [started, canceled] = await Promise.allSettled([
          store.attemptStart({ attemptId: a.id, token: a.token, pid: 7, now, leaseMs: LEASE }),
          store.jobCancel({ jobId: j.id, now, reason: 'canceled by user' }),
        ]);
        expect(canceled.status).toBe('fulfilled');
        const after = await store.jobGet({ jobId: j.id });
        expect(after!.state).toBe('canceled');
        expect(after!.stages.map((s) => s.state)).toEqual(['canceled', 'canceled']);
        // Started first or refused: either way the machine is told to kill it.
        const hb = await store.machineHeartbeat({
          machineId: m.id,
          running: [{ attemptId: a.id, token: a.token }],
          now,
          leaseMs: LEASE,
          missingAfterMs: 4000,
          jitter: 0,
        });
        expect(hb.kill.map((k) => k.attemptId)).toEqual([a.id]);
        if (started.status === 'rejected') expect(String(started.reason)).toMatch(/cancel|stale|ended/i);
      }
    });

    it('two registers of one name at once: one machine, one id, both answered', async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const name = `m${round}`;
        const [x, y] = await Promise.all([store.machineRegister({ ...cpuMachine(name), now }), store.machineRegister({ ...cpuMachine(name), now })]);
        expect(x.id).toBe(y.id);
      }
      const { machines } = await store.clusterView();
      expect(machines).toHaveLength(ROUNDS);
    });

    it('two plan appliers racing for the last GPU: exactly one placement holds it', async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const m = await store.machineRegister({ ...gpuMachine(`g${round}`, 1), now });
        const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] } };
        const j1 = await store.jobSubmit({ definition: job([stage('t', { resources: gpu })]), source: null, now });
        const j2 = await store.jobSubmit({ definition: job([stage('t', { resources: gpu })]), source: null, now });
        const [r1, r2] = await Promise.all([place(j1.id, 't', m.id, [0]), place(j2.id, 't', m.id, [0])]);
        expect(r1.applied.length + r2.applied.length).toBe(1);
        const view = await store.clusterView();
        expect(view.machines.find((x) => x.id === m.id)!.gpus.filter((g) => !g.free)).toHaveLength(1);
        const states = [(await stageOf(j1.id, 't')).state, (await stageOf(j2.id, 't')).state].sort();
        expect(states).toEqual(['ready', 'scheduled']);
      }
    });

    it('two plan appliers racing for the last CPUs: the machine is never over-committed', async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const m = await store.machineRegister({ ...cpuMachine(`c${round}`, { cpuMillis: 1000 }), now });
        const j1 = await store.jobSubmit({ definition: job([stage('t')]), source: null, now });
        const j2 = await store.jobSubmit({ definition: job([stage('t')]), source: null, now });
        const [r1, r2] = await Promise.all([place(j1.id, 't', m.id), place(j2.id, 't', m.id)]);
        expect(r1.applied.length + r2.applied.length).toBe(1);
        const view = await store.clusterView();
        expect(view.machines.find((x) => x.id === m.id)!.cpuMillisFree).toBe(0);
      }
    });

    it('replicas claiming the lease at once: exactly one leads each term', async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const at = now + round * 10_000;
        const claims = await Promise.all(['a', 'b', 'c'].map((holder) => store.leaderClaim({ holder, now: at, ttlMs: 5000 })));
        const leaders = claims.filter((c) => c.leader);
        expect(leaders).toHaveLength(1);
        expect(claims.every((c) => c.holder === leaders[0]!.holder && c.term === round + 1)).toBe(true);
      }
    });
  });
}
