import { describe, expect, it } from 'vitest';
import { terminalStates } from '../../domain/transition-table.js';
import { AttemptPhase, attemptTransitions, isFinal, mayRun, nextPhase } from './attempt-phase.js';

describe('AttemptPhase', () => {
  it('has a row for every phase, and only phases in its rows', () => {
    const phases = Object.values(AttemptPhase);
    expect(Object.keys(attemptTransitions).sort()).toEqual([...phases].sort());
    for (const to of Object.values(attemptTransitions).flat()) expect(phases).toContain(to);
  });

  it('ends only in the final phases, each reachable', () => {
    expect(terminalStates(attemptTransitions).sort()).toEqual(['abandoned', 'delivered', 'dropped', 'forgotten', 'left']);
    const reached = new Set(Object.values(attemptTransitions).flat());
    for (const p of Object.values(AttemptPhase)) if (p !== AttemptPhase.accepted) expect(reached.has(p)).toBe(true);
    expect(isFinal(AttemptPhase.delivered)).toBe(true);
    expect(isFinal(AttemptPhase.owed)).toBe(false);
  });

  it('throws on a move the table does not allow', () => {
    expect(nextPhase('a1', 'running', 'killing')).toBe('killing');
    expect(() => nextPhase('a1', 'owed', 'running')).toThrow(/owed → running is not a move an attempt makes/);
    expect(() => nextPhase('a1', 'delivered', 'owed')).toThrow();
    // A killed process is never reported: there is no way from killing to a delivery but through ended, then dropped.
    expect(() => nextPhase('a1', 'killing', 'owed')).toThrow();
  });

  it('says which phases a process may run in', () => {
    expect(Object.values(AttemptPhase).filter(mayRun)).toEqual(['accepted', 'acknowledging', 'starting', 'running']);
  });
});
