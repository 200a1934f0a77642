import { describe, expect, it } from 'vitest';
import type { RerunPlanView } from '../../api/contract/rerun';
import { formatGpuHours, rerunPlanRows, rerunSavings } from './rerun-plan-rows';

const plan: RerunPlanView = {
  jobId: 'job_a',
  from: ['eval'],
  reused: [
    { stage: 'prep', fromJob: 'job_0', attemptId: 'att_1', runSeconds: 65, gpus: 0, gpuHours: 0, files: 1, bytes: 2048 },
    { stage: 'train', fromJob: 'job_a', attemptId: 'att_2', runSeconds: 7200, gpus: 2, gpuHours: 4, files: 3, bytes: 1.5 * 2 ** 30 },
  ],
  rerun: [
    { stage: 'eval', because: null },
    { stage: 'report', because: 'eval' },
  ],
  gpuHoursSaved: 4,
  runSecondsSaved: 7265,
  canceled: false,
};

describe('rerun-plan-rows', () => {
  it("lists every stage in the job's order: reused ones with their source and cost, the others with why they run", () => {
    expect(rerunPlanRows(plan, ['prep', 'train', 'eval', 'report'])).toEqual([
      { stage: 'prep', plan: 'reused', fromJob: 'job_0', attemptId: 'att_1', ran: '1 min 05 s', gpuHours: '–', outputs: '1 file, 2 KiB' },
      { stage: 'train', plan: 'reused', fromJob: 'job_a', attemptId: 'att_2', ran: '2 h 00 min', gpuHours: '4.0 (2 GPUs)', outputs: '3 files, 1.5 GiB' },
      { stage: 'eval', plan: 'runs', why: 'chosen' },
      { stage: 'report', plan: 'runs', why: 'downstream of eval' },
    ]);
  });

  it('a stage the plan does not name is shown as running, not dropped', () => {
    expect(rerunPlanRows({ ...plan, reused: [], rerun: [] }, ['x'])).toEqual([{ stage: 'x', plan: 'runs', why: 'chosen' }]);
  });

  it('says what the reuse saves, in GPU-hours and run time', () => {
    expect(rerunSavings(plan)).toBe('Saves 4.0 GPU-hours and 2 h 01 min of stage run time: 2 stages reused, 2 run again.');
    expect(rerunSavings({ ...plan, reused: plan.reused.slice(0, 1), rerun: plan.rerun.slice(0, 1), gpuHoursSaved: 0, runSecondsSaved: 3 })).toBe(
      'Saves 0.0 GPU-hours and 3 s of stage run time: 1 stage reused, 1 runs again.',
    );
  });

  it('GPU-hours: one decimal, a short GPU stage still shows', () => {
    expect(formatGpuHours(48)).toBe('48.0');
    expect(formatGpuHours(0.0123)).toBe('0.012');
    expect(formatGpuHours(0)).toBe('0.0');
  });
});
