import type { TransitionTable } from './transition-table.js';

/** One execution of a stage on one machine; the unit of leasing and fencing. */
export const AttemptState = {
  /** Placed on a machine; resources are held. The agent's start report moves it to running; the
   *  reconciler moves it to lost when the assignment is not acknowledged in time. */
  scheduled: 'scheduled',
  /** The agent runs its process under a lease. The agent's outcome report, the reconciler (lease
   *  expired, machine lost) or a cancel moves it on. */
  running: 'running',
  /** Exited 0; its outputs are the stage's committed outputs. Terminal. */
  succeeded: 'succeeded',
  /** Ended any other way its agent reported (its end kind says how: attempt-end.ts). Terminal. */
  failed: 'failed',
  /** Its machine or lease was lost; not counted against the user's retries. Terminal. */
  lost: 'lost',
  /** Stopped to make room for higher-priority work. Terminal. */
  preempted: 'preempted',
  /** Its job was canceled, or a member of its gang ended (docs/gangs.md). Terminal. */
  canceled: 'canceled',
} as const;
export type AttemptState = (typeof AttemptState)[keyof typeof AttemptState];
export const attemptStates = Object.values(AttemptState);

export const attemptTransitions: TransitionTable<AttemptState> = {
  // scheduled -> succeeded/failed: the start report may be lost while the outcome arrives.
  scheduled: ['running', 'succeeded', 'failed', 'lost', 'preempted', 'canceled'],
  running: ['succeeded', 'failed', 'lost', 'preempted', 'canceled'],
  succeeded: [],
  failed: [],
  lost: [],
  preempted: [],
  canceled: [],
};

/** Attempts that hold resources on their machine. */
export const activeAttemptStates: readonly AttemptState[] = ['scheduled', 'running'];

export function isAttemptActive(s: string): boolean {
  return activeAttemptStates.includes(s as AttemptState);
}

/**
 * What an agent's own exit record amounts to, in protocol 1's fields: a success is a plain exit 0,
 * nothing else. The server decides on a reported outcome's typed end instead (isSuccessfulEnd,
 * attempt-end-policy.ts), which agrees with this on every protocol 1 outcome.
 */
export function isCleanExit(o: { exitCode: number | null; signal: string | null; reason: string | null }): boolean {
  return o.exitCode === 0 && o.signal === null && o.reason === null;
}
