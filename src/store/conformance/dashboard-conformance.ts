import { describe, expect, it } from 'vitest';
import type { Store } from '../store.js';
import { cpuMachine, gpuMachine, job, stage } from './fixtures.js';

/** The reads the dashboard needs beyond the CLI's (job names, what runs where): part of every adapter's conformance suite. */
export function dashboardConformance(store: () => Store): void {
  describe('dashboard reads', () => {
    const now = 1_700_000_000_000;

    it('lists jobs whose name holds a text, in any case, with LIKE wildcards taken literally', async () => {
      const s = store();
      const names = ['resnet-train', 'ResNet-eval', 'bert_base', 'bert-large', '50%-sweep'];
      for (const [i, name] of names.entries()) await s.jobSubmit({ definition: job([stage('x')], { name }), source: null, now: now + i });
      const list = async (name: string, more: { state?: 'queued'; team?: string } = {}) => (await s.jobList({ limit: 10, name, ...more })).map((j) => j.name);
      expect(await list('resnet')).toEqual(['ResNet-eval', 'resnet-train']);
      expect(await list('RESNET-T')).toEqual(['resnet-train']);
      expect(await list('_')).toEqual(['bert_base']);
      expect(await list('%')).toEqual(['50%-sweep']);
      expect(await list('bert', { state: 'queued' })).toEqual(['bert-large', 'bert_base']);
      expect(await list('bert', { team: 'other' })).toEqual([]);
      expect(await list('nothing-like-it')).toEqual([]);
    });

    it('lists the attempts that hold resources, with their job and machine, until released', async () => {
      const s = store();
      const g = await s.machineRegister({ ...gpuMachine('g1', 2), now });
      const c = await s.machineRegister({ ...cpuMachine('c1'), now });
      const gpu = { cpuMillis: 2000, memoryBytes: 2 ** 30, gpu: { count: 1, types: ['h100'] } };
      const a = await s.jobSubmit({ definition: job([stage('train', { resources: gpu })], { name: 'vision-job', team: 'vision' }), source: null, now });
      const b = await s.jobSubmit({ definition: job([stage('prep')], { name: 'nlp-job', team: 'nlp' }), source: null, now });
      const stageId = async (jobId: string) => (await s.jobGet({ jobId }))!.stages[0]!.id;
      const placed = await s.planApply({
        plan: {
          placements: [
            { stageId: await stageId(a.id), machineId: g.id, gpuIndices: [1], cpuMillis: 2000, memoryBytes: 2 ** 30 },
            { stageId: await stageId(b.id), machineId: c.id, gpuIndices: [], cpuMillis: 1000, memoryBytes: 2 ** 28 },
          ],
          pending: [],
        },
        now,
        leaseMs: 10_000,
      });
      expect(placed.applied).toHaveLength(2);
      const held = await s.attemptsHeld();
      expect(held.map((h) => [h.jobName, h.team, h.stageName, h.machineName, h.gpuIndices, h.state]).sort()).toEqual([
        ['nlp-job', 'nlp', 'prep', 'c1', [], 'scheduled'],
        ['vision-job', 'vision', 'train', 'g1', [1], 'scheduled'],
      ]);
      // Canceled, it still holds its GPU until its agent stops listing it; then it is gone from the list.
      await s.jobCancel({ jobId: a.id, now, reason: 'test' });
      expect((await s.attemptsHeld()).find((h) => h.jobId === a.id)?.state).toBe('canceled');
      await s.machineHeartbeat({ machineId: g.id, running: [], now, leaseMs: 10_000, missingAfterMs: 4000, jitter: 0 });
      expect((await s.attemptsHeld()).map((h) => h.jobName)).toEqual(['nlp-job']);
    });
  });
}
