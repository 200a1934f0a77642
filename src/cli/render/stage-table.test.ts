import { describe, expect, it } from 'vitest';
import type { AttemptView, JobView, StageView } from '../../api/contract/job-view.js';
import { renderStageTable } from './stage-table.js';

const T0 = 1_700_000_000_000;
const ANSI = /\u001b\[/;

function attempt(over: Partial<AttemptView>): AttemptView {
  return {
    id: 'a',
    number: 1,
    state: 'running',
    machine: 'gpu-1',
    machineId: 'm1',
    gpus: [],
    gpuType: null,
    exitCode: null,
    signal: null,
    reason: null,
    pid: null,
    outputs: null,
    scheduledAt: T0,
    startedAt: T0,
    finishedAt: null,
    ...over,
  };
}

function stage(over: Partial<StageView>): StageView {
  return {
    name: 's',
    state: 'pending',
    pool: 'default',
    needs: [],
    pendingReason: null,
    endReason: null,
    resources: { cpuMillis: 1000, memoryBytes: 512 * 1024 ** 2, gpu: null },
    attemptsUsed: 0,
    maxAttempts: 3,
    lostUsed: 0,
    outputAttemptId: null,
    readySince: null,
    notBefore: null,
    finishedAt: null,
    attempts: [],
    ...over,
  };
}

const job: JobView = {
  id: 'j_1',
  name: 'resnet-pipeline',
  team: 'vision',
  priority: 0,
  labels: {},
  state: 'running',
  failureReason: null,
  cancelRequestedAt: null,
  createdAt: T0,
  updatedAt: T0,
  finishedAt: null,
  stages: [
    stage({
      name: 'prep',
      state: 'succeeded',
      attemptsUsed: 0,
      finishedAt: T0 + 5_000,
      attempts: [attempt({ id: 'a0', state: 'succeeded', machine: 'cpu-1', exitCode: 0, finishedAt: T0 + 5_000 })],
    }),
    stage({
      name: 'train',
      state: 'running',
      needs: ['prep'],
      attemptsUsed: 1,
      attempts: [
        attempt({ id: 'a1', number: 1, state: 'failed', gpus: [0, 1], gpuType: 'h100', exitCode: 7, finishedAt: T0 + 10_000 }),
        attempt({ id: 'a2', number: 2, state: 'running', gpus: [0, 1], gpuType: 'h100', startedAt: T0 + 20_000 }),
      ],
    }),
    stage({ name: 'eval', state: 'ready', needs: ['train'], pendingReason: 'waiting for 1 free h100 GPU (2 machines busy)' }),
    stage({ name: 'report', state: 'pending', needs: ['eval'] }),
  ],
};

describe('renderStageTable', () => {
  const text = renderStageTable(job, T0 + 32_000, { color: false });
  const row = (name: string) => text.split('\n').find((l) => l.startsWith(`${name} `)) ?? '';

  it('shows machine, GPUs as type:indices, the attempt out of the maximum, and elapsed time', () => {
    expect(row('train')).toMatch(/^train\s+running\s+gpu-1\s+h100:0,1\s+2\/3\s+00:12\s*$/);
    expect(row('prep')).toMatch(/^prep\s+succeeded\s+cpu-1\s+-\s+1\/3\s+00:05/);
  });

  it('explains why a stage waits', () => {
    expect(row('eval')).toContain('waiting for 1 free h100 GPU (2 machines busy)');
    expect(row('report')).toContain('waiting for eval');
  });

  it('has a heading row and no colour codes when colours are off', () => {
    expect(text.split('\n')[0]).toMatch(/^STAGE\s+STATE\s+MACHINE\s+GPUS\s+ATTEMPT\s+ELAPSED\s+REASON$/);
    expect(text).not.toMatch(ANSI);
    expect(renderStageTable(job, T0, { color: true })).toMatch(ANSI);
  });

  it('shows a backoff as a countdown instead of the server deadline', () => {
    const backingOff = stage({
      name: 'retry',
      state: 'ready',
      attemptsUsed: 1,
      notBefore: T0 + 65_000,
      pendingReason: `attempt 1 failed (exit code 7); retrying: backing off until ${new Date(T0 + 65_000).toISOString()}`,
      attempts: [attempt({ state: 'failed', exitCode: 7, finishedAt: T0 })],
    });
    const out = renderStageTable({ ...job, stages: [backingOff] }, T0 + 5_000, { color: false });
    expect(out).toContain('attempt 1 failed (exit code 7); retrying; next try in 01:00');
    // Waiting again: no machine (the failed attempt's is where it ran, not where it runs).
    expect(out).toMatch(/retry\s+ready\s+-\s+-\s+1\/3\s+-\s/);
  });

  it('says "<1 s" for a backoff ending within the second, not the stopwatch "00:00"', () => {
    const backingOff = stage({
      name: 'retry',
      state: 'ready',
      attemptsUsed: 1,
      notBefore: T0 + 400,
      attempts: [attempt({ state: 'failed', exitCode: 7, finishedAt: T0 })],
    });
    const out = renderStageTable({ ...job, stages: [backingOff] }, T0, { color: false });
    expect(out).toContain('next try in <1 s');
    expect(out).not.toContain('00:00');
  });

  it('shows a stage requeued after a preemption as waiting: no machine or GPUs, its preempted attempt apart from the budget', () => {
    const requeued = stage({
      name: 'train',
      state: 'ready',
      pendingReason: 'attempt 1 preempted; requeued',
      attempts: [attempt({ state: 'preempted', gpus: [0, 1], gpuType: 'h100', finishedAt: T0 + 60_000 })],
    });
    const out = renderStageTable({ ...job, stages: [requeued] }, T0 + 90_000, { color: false });
    expect(out).toMatch(/train\s+ready\s+-\s+-\s+0\/3 \+1 preempted\s+-\s+attempt 1 preempted; requeued/);
    expect(out).not.toContain('gpu-1');
    expect(out).not.toContain('h100:0,1');
    // Running again: its new attempt's machine, and the preempted one still apart.
    const again = {
      ...requeued,
      state: 'running' as const,
      attempts: [...requeued.attempts, attempt({ id: 'b', number: 2, machine: 'gpu-2', gpus: [2, 3], gpuType: 'h100' })],
    };
    expect(renderStageTable({ ...job, stages: [again] }, T0 + 90_000, { color: false })).toMatch(/train\s+running\s+gpu-2\s+h100:2,3\s+1\/3 \+1 preempted/);
  });

  it('shows a placed gang as its machines, a row per member with its machine, GPUs and state, rank 0 first', () => {
    const members = [0, 1, 2].map((rank) => ({
      rank,
      attemptId: `g${rank}`,
      state: rank === 1 ? ('scheduled' as const) : ('running' as const),
      machine: `gpu-${rank + 1}`,
      machineId: `m${rank + 1}`,
      gpus: [0, 1],
      gpuType: 'h100',
    }));
    const ddp = stage({
      name: 'train',
      state: 'running',
      resources: { cpuMillis: 1000, memoryBytes: 512 * 1024 ** 2, gpu: { count: 2, types: ['h100'] }, machines: 3 },
      attempts: members.map((m) =>
        attempt({ id: m.attemptId, state: m.state, machine: m.machine, gpus: m.gpus, gpuType: 'h100', gangRank: m.rank, gangSize: 3 }),
      ),
      members,
    });
    const lines = renderStageTable({ ...job, stages: [ddp] }, T0 + 12_000, { color: false }).split('\n');
    expect(lines[1]).toMatch(/^train\s+running\s+3 machines\s+-\s+1\/3\s+00:12\s*$/);
    expect(lines.slice(2)).toEqual([
      expect.stringMatching(/^ {2}rank 0\s+running\s+gpu-1\s+h100:0,1\s*$/),
      expect.stringMatching(/^ {2}rank 1\s+scheduled\s+gpu-2\s+h100:0,1\s*$/),
      expect.stringMatching(/^ {2}rank 2\s+running\s+gpu-3\s+h100:0,1\s*$/),
    ]);
    // Waiting (not placed): no member rows, whatever an earlier attempt had.
    const requeued = renderStageTable({ ...job, stages: [{ ...ddp, state: 'ready' }] }, T0, { color: false });
    expect(requeued).not.toContain('rank 0');
  });
});
