import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY } from '../domain/job-definition.js';
import type { StageState } from '../domain/stage-state.js';
import type { StageNode } from './advance.js';
import { repairChanges } from './repair.js';

const node = (name: string, state: StageState, needs: string[] = []): StageNode => ({ name, state, needs, attemptsUsed: 0, lostUsed: 0, retry: DEFAULT_RETRY });

describe('repairChanges', () => {
  it('finds nothing in a consistent job', () => {
    expect(repairChanges([node('a', 'running'), node('b', 'pending', ['a'])])).toEqual([]);
  });
  it('readies a pending stage whose needs all succeeded', () => {
    expect(repairChanges([node('a', 'succeeded'), node('b', 'pending', ['a'])]).map((c) => [c.name, c.to])).toEqual([['b', 'ready']]);
  });
  it('skips what has not started in a failing job', () => {
    const c = repairChanges([node('a', 'failed'), node('b', 'ready'), node('c', 'pending', ['a']), node('d', 'running')]);
    expect(c.map((x) => [x.name, x.to])).toEqual([
      ['b', 'skipped'],
      ['c', 'skipped'],
    ]);
  });
});
