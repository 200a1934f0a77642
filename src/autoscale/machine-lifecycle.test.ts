import { describe, expect, it } from 'vitest';
import { canTransition, terminalStates } from '../domain/transition-table.js';
import { COUNTED_STATES, machineLifecycles, machineLifecycleTransitions, STARTING_STATES } from './machine-lifecycle.js';

// The allowed moves, written out apart from the table: a change to the table is made here too, on purpose.
const allowed = new Set(
  'provisioning>joining provisioning>ready provisioning>failed joining>ready joining>failed ready>draining draining>ready draining>released failed>released'.split(
    ' ',
  ),
);

describe('machine lifecycle transitions', () => {
  for (const from of machineLifecycles) {
    for (const to of machineLifecycles) {
      const ok = allowed.has(`${from}>${to}`);
      it(`${from} -> ${to} is ${ok ? 'allowed' : 'refused'}`, () => {
        expect(canTransition(machineLifecycleTransitions, from, to)).toBe(ok);
      });
    }
  }

  it('ends only in released, and every state reaches it', () => {
    expect(terminalStates(machineLifecycleTransitions)).toEqual(['released']);
    for (const s of machineLifecycles) {
      const seen = new Set([s]);
      const todo = [s];
      while (todo.length) {
        for (const n of machineLifecycleTransitions[todo.pop()!]) {
          if (!seen.has(n)) {
            seen.add(n);
            todo.push(n);
          }
        }
      }
      expect(seen.has('released'), s).toBe(true);
    }
  });

  it('a ready machine is never released without draining first (no scale-down skips the drain)', () => {
    expect(canTransition(machineLifecycleTransitions, 'ready', 'released')).toBe(false);
    expect(canTransition(machineLifecycleTransitions, 'ready', 'failed')).toBe(false);
  });

  it('counts starting machines toward the pool size and as supply', () => {
    expect([...COUNTED_STATES].sort()).toEqual(['joining', 'provisioning', 'ready']);
    expect([...STARTING_STATES].sort()).toEqual(['joining', 'provisioning']);
  });
});
