/**
 * The states clients see, as the wire spells them: the lists and their unions, what the CLI, the
 * dashboard and the SDK compare against (never a state set of their own). The state machines
 * themselves (who moves what where) are the domain's (src/domain/*-state.ts, docs/state-machines.md);
 * src/api/contract-agreement.ts fails the build if the two ever name different states.
 */

/** A job's state, derived from its stages. */
export const JOB_STATES = ['submitted', 'queued', 'scheduled', 'running', 'succeeded', 'failed', 'canceled'] as const;
export type JobState = (typeof JOB_STATES)[number];
/** A job in one of these has ended for good. */
export const TERMINAL_JOB_STATES = ['succeeded', 'failed', 'canceled'] as const satisfies readonly JobState[];

export const STAGE_STATES = ['pending', 'ready', 'scheduled', 'running', 'succeeded', 'failed', 'canceled', 'skipped'] as const;
export type StageState = (typeof STAGE_STATES)[number];
export const TERMINAL_STAGE_STATES = ['succeeded', 'failed', 'canceled', 'skipped'] as const satisfies readonly StageState[];

/** One execution of a stage on one machine. */
export const ATTEMPT_STATES = ['scheduled', 'running', 'succeeded', 'failed', 'lost', 'preempted', 'canceled'] as const;
export type AttemptState = (typeof ATTEMPT_STATES)[number];
/** Attempts that hold resources on their machine (placed or running); every other state is an end. */
export const ACTIVE_ATTEMPT_STATES = ['scheduled', 'running'] as const satisfies readonly AttemptState[];

/** Whether a machine is alive, as its heartbeats tell. */
export const MACHINE_HEALTHS = ['ready', 'suspect', 'lost'] as const;
export type MachineHealth = (typeof MACHINE_HEALTHS)[number];

/**
 * What an operator wants of a machine, as shown: `drained` is a draining machine on which nothing
 * holds resources any more (computed, never stored); `removed` is seen only in the answer to a remove.
 */
export const MACHINE_SCHEDULINGS = ['eligible', 'cordoned', 'draining', 'drained', 'removed'] as const;
export type MachineScheduling = (typeof MACHINE_SCHEDULINGS)[number];

/** What a token lets its holder do (docs/security.md). */
export const TOKEN_KINDS = ['admin', 'team', 'join', 'machine'] as const;
export type TokenKind = (typeof TOKEN_KINDS)[number];

/** A log chunk's stream. */
export const LOG_STREAMS = ['stdout', 'stderr'] as const;
export type LogStream = (typeof LOG_STREAMS)[number];

const has = (list: readonly string[], s: string) => list.includes(s);

/** Takes any string, since a newer server may send a state this client does not know (it is not terminal to it). */
export function isTerminalJobState(state: string): boolean {
  return has(TERMINAL_JOB_STATES, state);
}

export function isTerminalStageState(state: string): boolean {
  return has(TERMINAL_STAGE_STATES, state);
}

export function isActiveAttemptState(state: string): boolean {
  return has(ACTIVE_ATTEMPT_STATES, state);
}

export function isJobState(s: string): s is JobState {
  return has(JOB_STATES, s);
}
