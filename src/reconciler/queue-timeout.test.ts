import { describe, expect, it } from 'vitest';
import { gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import { queueTimeout } from './queue-timeout.js';

describe('queueTimeoutSeconds, by the reconciler', () => {
  it('fails a stage that waited too long, its pending reason as its end reason', async () => {
    const store = await openSqliteStore(':memory:');
    try {
      const t0 = 1_700_000_000_000;
      await store.machineRegister({ ...gpuMachine('gpu-1', 2, 'h100'), now: t0 });
      const gpu = { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 8, types: ['h100'] } };
      const j = await store.jobSubmit({ definition: job([stage('train', { resources: gpu, queueTimeoutSeconds: 30 })]), source: null, now: t0 });
      const settings = { queueTimeoutIntervalMs: 1000, queueTimeoutBatch: 100 };
      expect(await queueTimeout(store, { now: () => t0 + 29_000 }, settings).runOnce()).toEqual([]);
      const r = await queueTimeout(store, { now: () => t0 + 31_000 }, settings).runOnce();
      expect(r).toEqual([`${j.id}/train`]);
      const after = await store.jobGet({ jobId: j.id });
      expect(after!.state).toBe('failed');
      expect(after!.stages[0]!.endReason).toBe('waited 31 s in the queue, past its queueTimeoutSeconds (30): no ready machine can run it: 1 lacks 8 h100 GPUs');
    } finally {
      await store.close();
    }
  });

  it('fails at most queueTimeoutBatch stages a pass; the next pass takes the rest', async () => {
    const store = await openSqliteStore(':memory:');
    try {
      const t0 = 1_700_000_000_000;
      const ids: string[] = [];
      for (let i = 0; i < 3; i++)
        ids.push((await store.jobSubmit({ definition: job([stage('a', { queueTimeoutSeconds: 5 })], { name: `j${i}` }), source: null, now: t0 })).id);
      const duty = queueTimeout(store, { now: () => t0 + 6000 }, { queueTimeoutIntervalMs: 1000, queueTimeoutBatch: 2 });
      expect(duty.intervalMs).toBe(1000);
      expect(await duty.runOnce()).toHaveLength(2);
      expect(await duty.runOnce()).toHaveLength(1);
      expect(await duty.runOnce()).toEqual([]);
      for (const id of ids) expect((await store.jobGet({ jobId: id }))!.state).toBe('failed');
    } finally {
      await store.close();
    }
  });
});
