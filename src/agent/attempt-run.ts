import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import { canTransition, type TransitionTable } from '../domain/transition-table.js';
import type { AttemptPaths, ExitRecord } from './agent-state.js';
import type { DropReason } from './drop-reason.js';
import type { LogTail } from './log-tail.js';
import type { ProcessHandle } from './process-runner.js';

/**
 * Where one attempt stands on this agent, declared once (as the server's states are). Whether the
 * agent still cares (`dropped`: killed or withdrawn because the server decided, nothing to report)
 * is orthogonal: a dropped run still goes through `running` to `settled` as its process ends.
 *
 *   starting ──▶ running ──▶ owed ──▶ settled
 *      │            └────────────────────▲        (dropped: killed, nothing reported)
 *      ├──▶ owed  (never started: inputs failed, killed before the spawn)
 *      └──▶ settled (not acknowledged, assigned twice, dropped before the spawn)
 */
export const RunPhase = {
  /** Its directory being made, its inputs fetched, its acknowledgement on the way: nothing runs yet. */
  starting: 'starting',
  /** Its process runs (started by this agent, or re-attached to after a restart); a dropped one stays here until its last log lines are shipped. Listed in heartbeats. */
  running: 'running',
  /** Its process is over and its exit recorded on disk: log, outputs and outcome are owed to the server. Still listed. */
  owed: 'owed',
  /** Nothing more is owed (reported, refused, given up, dropped): forgotten, no longer listed. */
  settled: 'settled',
} as const;
export type RunPhase = (typeof RunPhase)[keyof typeof RunPhase];

export const runTransitions: TransitionTable<RunPhase> = {
  starting: ['running', 'owed', 'settled'],
  running: ['owed', 'settled'],
  owed: ['settled'],
  settled: [],
};

/** Moves a run on, or throws: a move the table does not allow is a bug in the agent. */
export function moveRun(run: Run, to: RunPhase): void {
  if (run.phase === to) return;
  if (!canTransition(runTransitions, run.phase, to)) throw new Error(`attempt ${run.a.attemptId}: ${run.phase} → ${to} is not a move a run makes`);
  run.phase = to;
}

/** Its process may still run: what a kill is for, and what a lost heartbeat makes the agent give up. */
export function isLive(run: Run): boolean {
  return (run.phase === RunPhase.starting || run.phase === RunPhase.running) && !run.dropped;
}

/** Listed in heartbeats (the server keeps its lease and its resources): until it is settled, and a dropped one only until its process is gone. */
export function isListed(run: Run): boolean {
  if (run.phase === RunPhase.settled) return false;
  return !run.dropped || run.phase !== RunPhase.owed;
}

/**
 * Whether the reporter is about to be handed an item of this run: the acknowledgement of one being
 * prepared, the outcome of one whose process ended, or perhaps that of one whose process started
 * after `youngSince` and may be about to end. A report waits a little for those (Reporter's
 * `coming`, at most its `gatherMs`), so that a group of them shares one request.
 */
export function isComing(run: Run, youngSince: number): boolean {
  if (run.dropped) return false;
  if (run.phase === RunPhase.starting) return !run.ackQueued;
  if (run.phase === RunPhase.running && !run.ended) return (run.spawnedAt ?? -Infinity) > youngSince;
  return run.ended === true && !run.outcomeQueued;
}

/** What the agent knows of one attempt it was given, from assignment to reported outcome. */
export interface Run {
  a: AssignmentWire;
  phase: RunPhase;
  paths: AttemptPaths | null;
  handle: ProcessHandle | null;
  /** Ships its log from the files; the outcome is reported only once it has shipped all of it. */
  tail: LogTail | null;
  /** The server has the whole log (or refused the rest for good): the outcome may go. */
  logShipped?: boolean;
  /** Set when the server refused part of the log: the files' sizes, sent with the outcome so the log says what is missing. */
  logBytes?: { stdout: number; stderr: number };
  /** Why the agent stopped caring: the server decided, or will. Nothing is reported once set. */
  dropped: DropReason | null;
  /** Its GANTRY_PROGRESS_FILE, followed while it runs. */
  progress?: import('./stage-progress.js').ProgressFile;
  /** With `dropped`: the time between TERM and KILL the server gave (a preempted attempt's, to checkpoint). */
  dropGraceMs?: number;
  /** Aborted with `dropped`: withdraws whatever of this attempt still waits in the reporter. */
  withdraw: AbortController;
  /** Set once the process is over; from then on the run is an outcome waiting to be delivered. */
  exit: ExitRecord | null;
  /** Its acknowledgement was handed to the reporter; before that, one is coming (isComing). */
  ackQueued?: boolean;
  /** When its process was started (the agent's clock). */
  spawnedAt?: number;
  /** Its process ended on its own (the exit not yet recorded, maybe); from then until `outcomeQueued`, an outcome is coming. */
  ended?: boolean;
  /** Its outcome's delivery began (log, outputs, then the reporter). */
  outcomeQueued?: boolean;
  uploaded: Map<string, number>;
  delivering: Promise<void> | null;
  /** When uploading its outputs first failed; it is given up after a while (the reporter does the same for the outcome). */
  firstDeliveryFailure?: number;
  task: Promise<void>;
}

export function newRun(a: AssignmentWire): Run {
  return {
    a,
    phase: RunPhase.starting,
    paths: null,
    handle: null,
    tail: null,
    dropped: null,
    withdraw: new AbortController(),
    exit: null,
    uploaded: new Map(),
    delivering: null,
    task: Promise.resolve(),
  };
}

/** Why a run was dropped, if it was: read through a call, since a field checked before an await may have been set during it. */
export function dropOf(run: Run): DropReason | null {
  return run.dropped;
}

export function describe(a: AssignmentWire): string {
  return `${a.attemptId} (${a.jobId}/${a.stageName} #${a.attemptNumber})`;
}

export function describeExit(e: ExitRecord): string {
  const how = e.exitCode !== null ? `exited with code ${e.exitCode}` : e.signal !== null ? `ended by ${e.signal}` : 'did not run';
  return e.reason ? `${how} (${e.reason})` : how;
}

export function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
