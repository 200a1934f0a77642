import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { gpuMachine, job, stage } from '../store/conformance/fixtures.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { poolsNow } from './pool-stats.js';

/** The pools page's groups of why stages wait, for gangs (docs/gangs.md, "Seen as one and as parts"). */
describe('poolsNow: a gang waits by the gang’s rule', () => {
  let store: Store;
  const now = 1_700_000_000_000;
  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
  });

  const submitGang = (team = 'default') =>
    store.jobSubmit({
      definition: job([stage('train', { resources: { cpuMillis: 1000, memoryBytes: 2 ** 28, gpu: { count: 1, types: ['h100'] }, machines: 2 } })], { team }),
      source: null,
      now,
    });
  const reasons = async () => (await poolsNow(store, now, { reasons: true })).find((p) => p.pool === 'gpu:h100')!.reasons;

  it('groups a gang of 2 on one machine as gang-machines, with the gang’s sentence, not as placeable', async () => {
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    await submitGang();
    expect(await reasons()).toEqual([{ kind: 'gang-machines', stages: 1, message: 'needs 2 machines with 1 h100 GPU: only 1 could run a member even idle' }]);
    await store.machineRegister({ ...gpuMachine('g2', 2), now });
    expect((await reasons()).map((r) => r.kind)).toEqual(['placeable']);
  });

  it('charges a gang to its team’s quota whole, as the pass does: 2 members of 1 GPU past a quota of 1', async () => {
    await store.machineRegister({ ...gpuMachine('g1', 2), now });
    await store.machineRegister({ ...gpuMachine('g2', 2), now });
    await store.teamPut({ name: 'vision', quota: { gpus: { h100: 1 } }, create: true, now });
    await submitGang('vision');
    const [r] = await reasons();
    expect(r?.kind).toBe('quota-never');
  });
});
