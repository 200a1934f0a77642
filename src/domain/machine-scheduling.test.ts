import { describe, expect, it } from 'vitest';
import { removeRefusal, type RemoveCandidate, shownScheduling } from './machine-scheduling.js';

describe('shownScheduling', () => {
  it('shows a draining machine with nothing held as drained, and everything else as it is', () => {
    expect(shownScheduling('draining', 0)).toBe('drained');
    expect(shownScheduling('draining', 1)).toBe('draining');
    expect(shownScheduling('cordoned', 0)).toBe('cordoned');
    expect(shownScheduling('eligible', 0)).toBe('eligible');
  });
});

describe('removeRefusal', () => {
  const m = (over: Partial<RemoveCandidate>): RemoveCandidate => ({
    name: 'g1',
    health: 'ready',
    scheduling: 'eligible',
    heldAttempts: 0,
    activeAttempts: 0,
    ...over,
  });

  it('lets a lost machine go, whatever the operator wanted of it, and whatever it still holds', () => {
    expect(removeRefusal(m({ health: 'lost' }))).toBeNull();
    expect(removeRefusal(m({ health: 'lost', scheduling: 'cordoned', heldAttempts: 2 }))).toBeNull();
  });

  it('lets a cordoned or drained machine with nothing on it go', () => {
    expect(removeRefusal(m({ scheduling: 'cordoned' }))).toBeNull();
    expect(removeRefusal(m({ scheduling: 'draining' }))).toBeNull();
    expect(removeRefusal(m({ health: 'suspect', scheduling: 'cordoned' }))).toBeNull();
  });

  it('refuses a machine in service, naming its health', () => {
    expect(removeRefusal(m({}))).toMatch(/^machine g1 is ready and in service; .*drain it first/);
    expect(removeRefusal(m({ health: 'suspect' }))).toMatch(/^machine g1 is suspect and in service/);
  });

  it('refuses one where attempts still hold resources, saying how many', () => {
    expect(removeRefusal(m({ scheduling: 'draining', heldAttempts: 2, activeAttempts: 2 }))).toMatch(
      /^machine g1 is ready and draining, and 2 attempts there still hold resources .*gantry machine drain g1 --wait/,
    );
    expect(removeRefusal(m({ scheduling: 'cordoned', heldAttempts: 1 }))).toMatch(/1 attempt there still holds resources/);
    expect(removeRefusal(m({ health: 'lost', activeAttempts: 1 }))).toMatch(/lost but still has 1 attempt placed or running/);
  });
});
