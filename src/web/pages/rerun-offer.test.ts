import { describe, expect, it } from 'vitest';
import type { JobView, StageView } from '../../api/contract/job-view';
import { rerunOffer } from './rerun-offer';

const stage = (name: string, state: StageView['state'], ...needs: string[]) => ({ name, state, needs }) as StageView;
const job = (state: JobView['state'], ...stages: StageView[]) => ({ state, stages });

describe('rerunOffer: "Rerun from here" only where the rerun route would take it', () => {
  it('a failed job: from the failed stage (what came before it succeeded); not from a stage whose upstream failed', () => {
    const j = job('failed', stage('make', 'succeeded'), stage('check', 'failed', 'make'), stage('report', 'skipped', 'check'));
    expect(rerunOffer(j, 'check')).toBe('rerun');
    expect(rerunOffer(j, 'make')).toBe('rerun');
    // Reusing check, which failed: the server refuses ("cannot be reused").
    expect(rerunOffer(j, 'report')).toBeNull();
  });

  it('a failed job with another failed branch: only a rerun that runs every stage that did not succeed', () => {
    const j = job('failed', stage('a', 'failed'), stage('b', 'failed'), stage('join', 'skipped', 'a', 'b'));
    expect(rerunOffer(j, 'a')).toBeNull();
    expect(rerunOffer(j, 'join')).toBeNull();
  });

  it('a succeeded job: from any stage', () => {
    const j = job('succeeded', stage('a', 'succeeded'), stage('b', 'succeeded', 'a'));
    expect(rerunOffer(j, 'a')).toBe('rerun');
    expect(rerunOffer(j, 'b')).toBe('rerun');
  });

  it('a running job: never a plain rerun (refused: a rerun starts from an ended job), a cancel and rerun where what is reused succeeded', () => {
    const j = job('running', stage('quick', 'succeeded'), stage('slow', 'running', 'quick'), stage('last', 'pending', 'slow'));
    expect(rerunOffer(j, 'slow')).toBe('cancel-and-rerun');
    expect(rerunOffer(j, 'quick')).toBe('cancel-and-rerun');
    // Reusing slow, which the cancel would leave canceled.
    expect(rerunOffer(j, 'last')).toBeNull();
  });

  it('an unknown stage: nothing', () => {
    expect(rerunOffer(job('failed', stage('a', 'failed')), 'b')).toBeNull();
  });
});
