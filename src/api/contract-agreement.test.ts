import { describe, expect, it } from 'vitest';
import { attemptEndKinds } from '../domain/attempt-end.js';
import { activeAttemptStates, attemptStates } from '../domain/attempt-state.js';
import { jobStates, jobTransitions } from '../domain/job-state.js';
import { machineHealths } from '../domain/machine-health.js';
import { machineSchedulings } from '../domain/machine-scheduling.js';
import { stageStates, stageTransitions } from '../domain/stage-state.js';
import { tokenKinds } from '../domain/token-kind.js';
import { terminalStates } from '../domain/transition-table.js';
import * as wire from './contract/states.js';
import { ATTEMPT_END_KINDS } from './contract/attempt-end.js';

// The types agree at compile time (contract-agreement.ts); these are the values types cannot see.
describe('the contract states agree with the domain state machines', () => {
  it('lists the same states, in the same (lifecycle) order', () => {
    expect(wire.JOB_STATES).toEqual(jobStates);
    expect(wire.STAGE_STATES).toEqual(stageStates);
    expect(wire.ATTEMPT_STATES).toEqual(attemptStates);
    expect(wire.MACHINE_HEALTHS).toEqual(machineHealths);
    expect(wire.TOKEN_KINDS).toEqual(tokenKinds);
    expect(wire.MACHINE_SCHEDULINGS.filter((s) => s !== 'drained')).toEqual(machineSchedulings);
    expect(ATTEMPT_END_KINDS).toEqual(attemptEndKinds);
  });

  it('ends where the transition tables end', () => {
    expect([...wire.TERMINAL_JOB_STATES].sort()).toEqual(terminalStates(jobTransitions).sort());
    expect([...wire.TERMINAL_STAGE_STATES].sort()).toEqual(terminalStates(stageTransitions).sort());
    expect(wire.ACTIVE_ATTEMPT_STATES).toEqual(activeAttemptStates);
    for (const s of jobStates) expect(wire.isTerminalJobState(s)).toBe(jobTransitions[s].length === 0);
    for (const s of stageStates) expect(wire.isTerminalStageState(s)).toBe(stageTransitions[s].length === 0);
  });
});
