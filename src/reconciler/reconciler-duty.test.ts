import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeartbeatLiveness } from '../api/heartbeat-liveness.js';
import { blobKey, cpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { jobRepair } from './job-repair.js';
import { lostAttempts } from './lost-attempts.js';
import { lostMachines } from './lost-machines.js';
import { pruning } from './pruning.js';
import { retention } from './retention.js';

// Each duty's runOnce alone, against a real store, with its limits from its settings.
describe('the reconciler duties, each alone', () => {
  const t0 = 1_700_000_000_000;
  let store: Store;
  let now: number;
  const clock = { now: () => now };
  const LEASE = 10_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
    now = t0;
  });
  afterEach(async () => {
    await store.close();
  });

  const place = async (jobId: string, name: string, machineId: string) => {
    const s = (await store.jobGet({ jobId }))!.stages.find((x) => x.name === name)!;
    const r = await store.planApply({
      plan: {
        placements: [
          { stageId: s.id, machineId, gpuIndices: [], cpuMillis: s.definition.resources.cpuMillis, memoryBytes: s.definition.resources.memoryBytes },
        ],
        pending: [],
      },
      now,
      leaseMs: LEASE,
    });
    return r.applied[0]!;
  };

  it('lost-machines: silent past suspectAfterMs is suspect, past lostAfterMs lost with its attempts', async () => {
    const m = await store.machineRegister({ ...cpuMachine('c1'), now });
    const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
    const a = await place(j.id, 'a', m.id);
    await store.attemptStart({ attemptId: a.id, token: a.token, pid: 5, now, leaseMs: 60_000 });
    const duty = lostMachines(store, clock, { suspectAfterMs: 4000, lostAfterMs: 10_000, lostMachinesIntervalMs: 700 }, () => 0);
    expect([duty.name, duty.intervalMs]).toEqual(['lost-machines', 700]);
    now += 3000;
    expect((await duty.runOnce()).machines).toEqual([]);
    now += 2000;
    expect((await duty.runOnce()).machines).toEqual([{ machineId: m.id, from: 'ready', to: 'suspect' }]);
    now += 6000;
    const r = await duty.runOnce();
    expect(r.machines[0]!.to).toBe('lost');
    expect(r.lostAttempts).toEqual([a.id]);
  });

  it('lost-machines: a machine whose arrival a HeartbeatLiveness holds unwritten is not judged', async () => {
    const m = await store.machineRegister({ ...cpuMachine('c1'), now });
    const liveness = new HeartbeatLiveness();
    const duty = lostMachines(
      store,
      clock,
      { suspectAfterMs: 4000, lostAfterMs: 10_000, lostMachinesIntervalMs: 700 },
      () => 0,
      (id) => liveness.heardAt(id),
    );
    now += 11_000;
    liveness.record(m.id, now - 500);
    expect((await duty.runOnce()).machines).toEqual([]);
    // Written, the arrival is the row's: still not judged; then silence past the allowance is.
    await liveness.flush(store, now);
    expect(liveness.heardAt(m.id)).toBeUndefined();
    expect((await duty.runOnce()).machines).toEqual([]);
    now += 11_000;
    expect((await duty.runOnce()).machines).toEqual([{ machineId: m.id, from: 'ready', to: 'lost' }]);
  });

  it('lost-attempts: an assignment not acknowledged within ackTimeoutMs is lost and its stage ready again', async () => {
    const m = await store.machineRegister({ ...cpuMachine('c1'), now });
    const j = await store.jobSubmit({ definition: job([stage('a')]), source: null, now });
    const a = await place(j.id, 'a', m.id);
    const duty = lostAttempts(store, clock, { ackTimeoutMs: 20_000, lostAttemptsIntervalMs: 800 }, () => 0);
    expect([duty.name, duty.intervalMs]).toEqual(['lost-attempts', 800]);
    now += 19_000;
    expect((await duty.runOnce()).lostAttempts).toEqual([]);
    now += 2000;
    expect((await duty.runOnce()).lostAttempts).toEqual([a.id]);
    expect((await store.jobGet({ jobId: j.id }))!.stages[0]!.state).toBe('ready');
  });

  it('repair: asks the store with its settings, and carries its sweep cursor from one pass to the next', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await store.jobSubmit({ definition: job([stage('a')], { name: `j${i}` }), source: null, now })).id);
    ids.sort();
    const spy = vi.spyOn(store, 'jobsRepair');
    const duty = jobRepair(store, clock, { repairAfterMs: 1000, repairIntervalMs: 900, repairBatch: 7, repairScan: 2 });
    expect([duty.name, duty.intervalMs]).toEqual(['repair', 900]);
    now += 60_000;
    for (let i = 0; i < 4; i++) expect(await duty.runOnce()).toEqual([]);
    expect(spy.mock.calls.map(([p]) => p.after)).toEqual([null, ids[1], ids[3], null]);
    expect(spy.mock.calls[0]![0]).toMatchObject({ now, staleAfterMs: 1000, limit: 7, scan: 2 });
  });

  it('retention: deletes jobs ended retentionMs ago, at most retentionBatch a pass, and hands over their old directories', async () => {
    const m = await store.machineRegister({ ...cpuMachine('c1'), now });
    const ended: string[] = [];
    const attempts: string[] = [];
    for (let i = 0; i < 3; i++) {
      const j = await store.jobSubmit({ definition: job([stage('a')], { name: `old${i}` }), source: null, now });
      const a = await place(j.id, 'a', m.id);
      await store.attemptStart({ attemptId: a.id, token: a.token, pid: 123, now, leaseMs: LEASE });
      await store.outputUploaded({ attemptId: a.id, token: a.token, path: 'out.txt', blob: blobKey(`${a.id}/out.txt`), size: 3, now });
      await store.attemptComplete({
        attemptId: a.id,
        token: a.token,
        exitCode: 0,
        signal: null,
        end: { kind: 'exited', detail: null },
        outputs: [{ path: 'out.txt', size: 3 }],
        now,
        jitter: 0.5,
      });
      ended.push(j.id);
      attempts.push(a.id);
    }
    const removed: string[] = [];
    const duty = retention(store, clock, { retentionMs: 50_000, retentionIntervalMs: 1100, retentionBatch: 2 }, async (dirs) => void removed.push(...dirs));
    expect([duty.name, duty.intervalMs]).toEqual(['retention', 1100]);
    now += 50_000;
    expect(await duty.runOnce()).toEqual([]);
    now += 1;
    const first = await duty.runOnce();
    expect(first).toHaveLength(2);
    const second = await duty.runOnce();
    expect([...first, ...second].sort()).toEqual([...ended].sort());
    expect(removed.sort()).toEqual([...attempts].sort());
    expect(await duty.runOnce()).toEqual([]);
  });

  it('pruning: published outbox rows go after outboxKeepMs, Idempotency-Keys after idempotencyKeepMs', async () => {
    await store.jobSubmit({ definition: job([stage('a')]), source: null, now, idempotency: { scope: 'team:ml', key: 'k', requestHash: 'h' } });
    const ids = (await store.outboxPending({ limit: 100 })).map((p) => p.id);
    expect(ids.length).toBeGreaterThan(0);
    await store.outboxMarkPublished({ ids, now });
    const duty = pruning(store, clock, {
      pruneIntervalMs: 1200,
      outboxKeepMs: 1000,
      idempotencyKeepMs: 5000,
      auditKeepMs: 86_400_000,
      tokenKeepMs: 86_400_000,
    });
    expect([duty.name, duty.intervalMs]).toEqual(['pruning', 1200]);
    now += 1000;
    expect(await duty.runOnce()).toEqual({ outbox: 0, idempotencyKeys: 0, audit: 0, tokens: 0 });
    now += 1;
    expect(await duty.runOnce()).toEqual({ outbox: ids.length, idempotencyKeys: 0, audit: 0, tokens: 0 });
    now += 4000;
    expect(await duty.runOnce()).toEqual({ outbox: 0, idempotencyKeys: 1, audit: 0, tokens: 0 });
  });

  it('pruning: audit rows go auditKeepMs after they began (a folded row by its first time), a bounded number a pass', async () => {
    const day = 86_400_000;
    const who = { tokenId: 'tok_1', actor: 'team ml token tok_1 (ci)', action: 'job.cancel' };
    for (let i = 0; i < 1001; i++) await store.auditRecord({ ...who, target: `job_${i}`, result: 'refused: 404 not_found: no', now });
    now += day;
    await store.auditRecord({ ...who, target: 'later', result: 'refused: 404 not_found: no', now, foldWithinMs: 60_000 });
    await store.auditRecord({ ...who, target: 'later', result: 'refused: 404 not_found: no', now: now + 30_000, foldWithinMs: 60_000 });
    const duty = pruning(store, clock, { pruneIntervalMs: 1000, outboxKeepMs: 0, idempotencyKeepMs: day, auditKeepMs: 90 * day, tokenKeepMs: 30 * day });
    now = t0 + 90 * day;
    expect((await duty.runOnce()).audit).toBe(0);
    now += 1;
    expect((await duty.runOnce()).audit).toBe(1000);
    expect((await duty.runOnce()).audit).toBe(1);
    expect((await store.auditList({ limit: 10 })).map((r) => [r.target, r.count])).toEqual([['later', 2]]);
    now = t0 + 91 * day + 1;
    expect((await duty.runOnce()).audit).toBe(1);
    expect(await store.auditList({ limit: 10 })).toEqual([]);
  });

  it('pruning: tokens revoked or expired tokenKeepMs ago go, looked at once an hour unless a pass found a full batch', async () => {
    const day = 86_400_000;
    await store.tokenCreate({ id: 'tok_live', kind: 'team', team: 'ml', name: 'ci', hash: 'h_live', expiresAt: null, now });
    await store.tokenCreate({ id: 'tok_session', kind: 'admin', team: null, name: 'dashboard', hash: 'h_session', expiresAt: now + 12 * 3_600_000, now });
    await store.tokenCreate({ id: 'tok_old', kind: 'team', team: 'ml', name: 'old', hash: 'h_old', expiresAt: null, now });
    await store.tokenRevoke({ id: 'tok_old', now: now + day });
    const duty = pruning(store, clock, { pruneIntervalMs: 1000, outboxKeepMs: 0, idempotencyKeepMs: day, auditKeepMs: 90 * day, tokenKeepMs: 30 * day });
    const ids = async () => (await store.tokenList({ includeRevoked: true })).map((t) => t.id).sort();
    const hour = 3_600_000;
    now = t0 + 30 * day + 11.5 * hour;
    expect((await duty.runOnce()).tokens).toBe(0);
    // The session ended 12 hours after t0: past its 30 days now, but the duty looked half an hour ago.
    now = t0 + 30 * day + 12 * hour + 1;
    expect((await duty.runOnce()).tokens).toBe(0);
    expect(await ids()).toEqual(['tok_live', 'tok_old', 'tok_session']);
    now = t0 + 30 * day + 12.5 * hour;
    expect((await duty.runOnce()).tokens).toBe(1);
    now = t0 + 31 * day + 1;
    expect((await duty.runOnce()).tokens).toBe(1);
    expect(await ids()).toEqual(['tok_live']);
  });
});
