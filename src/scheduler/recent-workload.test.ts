import { describe, expect, it } from 'vitest';
import type { Resources } from '../domain/resources.js';
import { RecentWorkload } from './recent-workload.js';
import type { QueuedStage, RunningAttempt } from './snapshot.js';
import type { TargetWorkload } from './target-workload.js';

function stage(id: string, gpu: Resources['gpu']): QueuedStage {
  return {
    stageId: id,
    jobId: 'j',
    stageName: id,
    pool: 'gpu:any',
    priority: 0,
    readySince: 0,
    resources: { cpuMillis: 1000, memoryBytes: 1, gpu },
    placement: { region: null, labels: {} },
  };
}

const shapes = (w: TargetWorkload) =>
  w.shapes.map((s) => `${s.gpuCount}×${s.gpuMilli}${s.gpuTypes.length ? `:${s.gpuTypes.join('|')}` : ''}=${s.count}`).sort();

describe('RecentWorkload', () => {
  it('remembers the GPU stages earlier passes saw, each once, beyond the pass that sees them', () => {
    const r = new RecentWorkload();
    r.observe({ queue: [stage('a', { count: 1, types: ['t4'] }), stage('cpu', null)] });
    r.observe({ queue: [stage('a', { count: 1, types: ['t4'] }), stage('b', { count: 1, types: [], milli: 500 })] });
    // A later pass with one untyped stage still plans against the typed work seen before.
    const w = r.observe({ queue: [stage('c', { count: 8, types: [] })] });
    expect(shapes(w)).toEqual(['1×1000:t4=1', '1×500=1', '8×1000=1']);
    expect(r.size).toBe(3);
  });

  it('keeps the last `limit` stages: the oldest goes first', () => {
    const r = new RecentWorkload(2);
    r.observe({ queue: [stage('a', { count: 1, types: ['p100'] })] });
    r.observe({ queue: [stage('b', { count: 2, types: [] })] });
    const w = r.observe({ queue: [stage('c', { count: 4, types: [] })] });
    expect(shapes(w)).toEqual(['2×1000=1', '4×1000=1']);
    expect(r.size).toBe(2);
  });

  it('counts the attempts in view, and forgets them once they are gone', () => {
    const r = new RecentWorkload();
    const running: RunningAttempt = {
      attemptId: 'x',
      token: 1,
      stageId: 'x',
      jobId: 'j',
      stageName: 'x',
      machineId: 'm',
      team: 'default',
      priority: 0,
      preemptible: true,
      cpuMillis: 1000,
      memoryBytes: 1,
      gpuIndices: [0],
      gpuType: 'h100',
      startedAt: 0,
      stagePreemptedAt: null,
      leaving: false,
    };
    expect(shapes(r.observe({ queue: [stage('a', { count: 1, types: [] })], running: [running] }))).toEqual(['1×1000:h100=1', '1×1000=1']);
    expect(shapes(r.observe({ queue: [] }))).toEqual(['1×1000=1']);
  });

  it('refuses a limit that is not a positive whole number', () => {
    expect(() => new RecentWorkload(0)).toThrow(/positive whole number, not 0/);
  });
});
