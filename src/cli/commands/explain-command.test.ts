import { describe, expect, it } from 'vitest';
import type { StageExplanation } from '../../api/contract/job-view.js';
import { renderExplanation } from './explain-command.js';

const explanation: StageExplanation = {
  jobId: 'job_1',
  stage: 'train',
  state: 'ready',
  pool: 'gpu:h100',
  reason: 'no ready machine can run it: 2 lack 4 h100 GPUs, 1 cordoned',
  quota: null,
  waitsFor: [],
  queue: { ahead: 0, waiting: 1 },
  registered: 4,
  funnel: [
    { step: 'ready and in service (not suspect, lost, cordoned or draining)', reason: 'not-ready', machines: 3 },
    { step: 'with h100 GPUs', reason: 'gpu-type', machines: 1 },
    { step: 'with 4 h100 GPUs in all', reason: 'gpu-total', machines: 0 },
    { step: 'with 1 CPU in all', reason: 'cpu-total', machines: 0 },
  ],
  suggestions: ['ask for 2 GPUs instead of 4: 1 machine could run it now'],
};

describe('gantry explain', () => {
  it('says each count is what is left after the checks so far, how many fail each, and which checks no machine reached', () => {
    expect(renderExplanation(explanation)).toBe(
      [
        'stage train (ready, pool gpu:h100): no ready machine can run it: 2 lack 4 h100 GPUs, 1 cordoned',
        '  queue: 0 ahead of it, 1 waiting in all',
        '  machines: 4 registered; left after each check, in the order the scheduler runs them:',
        '    3 of 4 left  ready and in service (not suspect, lost, cordoned or draining) (1 of 4 fail it)',
        '    1 of 4 left  with h100 GPUs (2 of 3 fail it)',
        '    0 of 4 left  with 4 h100 GPUs in all (1 of 1 fails it)',
        // Not "no machine has 1 CPU": none was left to ask.
        '    0 of 4 left  with 1 CPU in all (not checked: no machine left)',
        '  it could run now if it would:',
        '    - ask for 2 GPUs instead of 4: 1 machine could run it now',
        '',
      ].join('\n'),
    );
  });

  it('aligns the counts of a cluster of ten or more', () => {
    const lines = renderExplanation({
      ...explanation,
      registered: 12,
      funnel: [
        { step: 'ready and in service', reason: 'not-ready', machines: 12 },
        { step: 'with 1 CPU free now', reason: 'cpu-busy', machines: 0 },
      ],
    }).split('\n');
    expect(lines).toContain('    12 of 12 left  ready and in service');
    expect(lines).toContain('    0 of 12 left   with 1 CPU free now (12 of 12 fail it)');
  });
});
