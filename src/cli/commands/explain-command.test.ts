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
  it("says a gang's size and that its funnel counts machines for one member", () => {
    const gang: StageExplanation = {
      ...explanation,
      reason: 'needs 3 machines with 4 free h100 GPUs in one rack: 2 racks have 2',
      gang: { size: 3, sameLabel: 'rack' },
      funnel: explanation.funnel.slice(0, 1),
      suggestions: [],
    };
    expect(renderExplanation(gang)).toBe(
      [
        'stage train (ready, pool gpu:h100): needs 3 machines with 4 free h100 GPUs in one rack: 2 racks have 2',
        '  queue: 0 ahead of it, 1 waiting in all',
        '  gang: 3 machines at once, one member each, all with one value of label rack',
        '  machines: 4 registered; left for one member after each check, in the order the scheduler runs them:',
        '    3 of 4 left  ready and in service (not suspect, lost, cordoned or draining) (1 of 4 fail it)',
        '',
      ].join('\n'),
    );
  });

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

  it('says what the autoscaler does for it: the reason it starts nothing beside the scheduler’s', () => {
    const lines = renderExplanation({
      ...explanation,
      funnel: [],
      suggestions: [],
      autoscale: { kind: 'gpu-type', message: 'no template has a100 GPUs', pool: null, machine: null },
    }).split('\n');
    expect(lines.slice(0, 3)).toEqual([
      'stage train (ready, pool gpu:h100): no ready machine can run it: 2 lack 4 h100 GPUs, 1 cordoned',
      '  queue: 0 ahead of it, 1 waiting in all',
      '  autoscaler: no template has a100 GPUs (`gantry autoscale`)',
    ]);
  });

  it('a machine held for it is its reason, said once', () => {
    const message = 'a machine of pool h100 (h100-3) is starting for it, up to 600 s (started 42 s ago)';
    const text = renderExplanation({
      ...explanation,
      reason: message,
      funnel: [],
      suggestions: [],
      autoscale: { kind: 'held', message, pool: 'h100', machine: 'h100-3' },
    });
    expect(text.split('\n')[0]).toBe(`stage train (ready, pool gpu:h100): ${message}`);
    expect(text.split(message).length).toBe(2);
  });
});
