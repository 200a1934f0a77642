import { describe, expect, it } from 'vitest';
import { rankFollowState } from './log-follow.js';

type A = { number: number; rank: number; state: 'running' | 'succeeded'; releasedAt: number | null };
const member = (rank: number, over: Partial<A> = {}): A => ({ number: 1, rank, state: 'succeeded', releasedAt: 1, ...over });
const rankOf = (a: A) => a.rank;

describe('rankFollowState', () => {
  it("follows one member's own attempt: complete once its process is gone, whatever the others'", () => {
    const stage = { state: 'succeeded', attempts: [member(0), member(1, { releasedAt: null }), member(2)] };
    expect(rankFollowState(stage, undefined, 2, rankOf)).toMatchObject({ attempt: member(2), ended: true });
    expect(rankFollowState(stage, undefined, 1, rankOf)).toMatchObject({ attempt: member(1, { releasedAt: null }), ended: false });
  });

  it("follows all: complete only once every member's process is gone; the end names rank 0's attempt", () => {
    const waiting = { state: 'succeeded', attempts: [member(0), member(1, { releasedAt: null })] };
    expect(rankFollowState(waiting, 1, 'all', rankOf)).toMatchObject({ attempt: member(0), ended: false });
    expect(rankFollowState(waiting, 1, 'all', rankOf).attempts).toHaveLength(2);
    const done = { state: 'succeeded', attempts: [member(0), member(1)] };
    expect(rankFollowState(done, 1, 'all', rankOf).ended).toBe(true);
  });

  it('a stage that has not run has no attempt to follow, for any rank', () => {
    expect(rankFollowState({ state: 'ready', attempts: [] as A[] }, undefined, 'all', rankOf)).toEqual({
      attempt: null,
      ended: false,
      missing: false,
      attempts: [],
    });
  });
});
