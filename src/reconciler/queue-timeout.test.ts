import { describe, expect, it } from 'vitest';
import { gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import { reconcilePass } from './reconcile.js';

describe('queueTimeoutSeconds, by the reconciler', () => {
  it('fails a stage that waited too long, its pending reason as its end reason', async () => {
    const store = await openSqliteStore(':memory:');
    try {
      const t0 = 1_700_000_000_000;
      await store.machineRegister({ ...gpuMachine('gpu-1', 2, 'h100'), now: t0 });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 8, types: ['h100'] } };
      const j = await store.jobSubmit({ definition: job([stage('train', { resources: gpu, queueTimeoutSeconds: 30 })]), source: null, now: t0 });
      const settings = { suspectAfterMs: 10 ** 9, lostAfterMs: 10 ** 9, ackTimeoutMs: 10 ** 9, repairAfterMs: 10 ** 9, retentionMs: 10 ** 12 };
      expect((await reconcilePass(store, { now: () => t0 + 29_000 }, settings)).queueTimedOut).toEqual([]);
      const r = await reconcilePass(store, { now: () => t0 + 31_000 }, settings);
      expect(r.queueTimedOut).toEqual([`${j.id}/train`]);
      const after = await store.jobGet({ jobId: j.id });
      expect(after!.state).toBe('failed');
      expect(after!.stages[0]!.endReason).toBe('waited 31 s in the queue, past its queueTimeoutSeconds (30): no ready machine can run it: 1 lacks 8 h100 GPUs');
    } finally {
      await store.close();
    }
  });
});
