import { isActiveAttemptState, isTerminalStageState, type AttemptState } from './states.js';

/**
 * Following a stage's log (`GET /v1/jobs/{id}/stages/{stage}/logs?follow=1`, server-sent events):
 *
 *   event `chunk`, id = the chunk's id, data = a LogChunkView   (each piece once, in order)
 *   event `end`, data = LogFollowEnd                             (the log is complete; the server closes)
 *
 * A client that loses the connection opens it again with `Last-Event-ID` (the last chunk id it
 * got; `?after=` does the same) and gets the rest; a stream closed without `end` was cut short.
 * The position is the chunk id rather than a byte offset: a stage's log is its stdout and stderr
 * interleaved, and one number names a place in both.
 */
export interface LogFollowEnd {
  /** The attempt whose log ended the stream (the latest, or the one asked for); null: the stage ended without running. */
  attempt: number | null;
  /** That attempt's state, or the stage's when it never ran. */
  state: string;
}

/** What `logFollowState` needs of a stage: a StageView, or the server's own record of one. */
export interface FollowedStage<A extends FollowedAttempt> {
  state: string;
  attempts: readonly A[];
}

export interface FollowedAttempt {
  number: number;
  state: AttemptState;
  /** When its process was known gone; undefined from servers older than the field (the stage's end is then all there is to go on). */
  releasedAt?: number | null;
}

/**
 * Where a followed log stands. `attempt`: the attempt read (the one asked for, else the latest);
 * null when the stage has not run yet, or has no attempt of that number (`missing`). `ended`: its
 * log is complete, so following may stop: the attempt is over (with no number asked for: the stage
 * has ended, since a retry's output follows on) and its process is gone, which its agent says only
 * after it has shipped the last of the output (a canceled stage's lines written in its kill grace
 * included). One rule for the server's stream and for a client polling a server without it.
 */
export function logFollowState<A extends FollowedAttempt>(stage: FollowedStage<A>, attempt?: number): { attempt: A | null; ended: boolean; missing: boolean } {
  const a = attempt !== undefined ? stage.attempts.find((x) => x.number === attempt) : stage.attempts.at(-1);
  if (!a) return { attempt: null, ended: attempt === undefined && isTerminalStageState(stage.state), missing: attempt !== undefined };
  const over = attempt !== undefined ? !isActiveAttemptState(a.state) : isTerminalStageState(stage.state);
  return { attempt: a, ended: over && a.releasedAt !== null, missing: false };
}

/**
 * logFollowState for a gang's rank (docs/gangs.md): the member's own attempts, so its log is
 * complete when its own process is gone; `all`: complete when every member's is (`attempt` is
 * rank 0's). `attempts`: those followed, one per rank. An ordinary stage's attempts are rank 0's.
 */
export function rankFollowState<A extends FollowedAttempt>(
  stage: FollowedStage<A>,
  attempt: number | undefined,
  rank: number | 'all',
  rankOf: (a: A) => number,
): { attempt: A | null; ended: boolean; missing: boolean; attempts: A[] } {
  const ranks = rank === 'all' ? [...new Set(stage.attempts.map(rankOf))].sort((a, b) => a - b) : [rank];
  if (ranks.length === 0) ranks.push(0);
  const states = ranks.map((r) => logFollowState({ state: stage.state, attempts: stage.attempts.filter((a) => rankOf(a) === r) }, attempt));
  return { ...states[0]!, ended: states.every((x) => x.ended), attempts: states.flatMap((x) => (x.attempt ? [x.attempt] : [])) };
}
