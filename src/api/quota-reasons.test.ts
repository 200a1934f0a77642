import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { quotaReasons } from './quota-reasons.js';

/** Status's and explain's quota line (docs/gangs.md, "Seen as one and as parts"): a gang is charged whole, as the pass charges it. */
describe('quotaReasons', () => {
  let store: Store;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  it('a gang of 2 × 1 GPU is past a quota of 1 GPU, where one of its members alone is not', async () => {
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    await store.machineRegister({ ...gpuMachine('g2', 2), now });
    await store.teamPut({ name: 'vision', quota: { gpus: { h100: 1 } }, create: true, now });
    const gpu = { count: 1, types: ['h100'] };
    const j = await store.jobSubmit({
      definition: job(
        [
          stage('train', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu, machines: 2 } }),
          stage('one', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu } }),
        ],
        { team: 'vision' },
      ),
      source: null,
      now,
    });
    const { machines } = await store.clusterView();
    const reasons = await quotaReasons(store, 'vision', j.stages, machines);
    const [train, one] = j.stages;
    expect(reasons.get(train!.id)).toBe(
      "team vision's quota is 1 h100 GPUs, the stage needs 2: it can never run within the quota (raise the quota, or make the stage preemptible so it may borrow)",
    );
    expect(reasons.has(one!.id)).toBe(false);
  });
});
