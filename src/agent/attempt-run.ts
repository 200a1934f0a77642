import type { AssignmentWire } from '../api/contract/agent-protocol.js';
import type { AttemptPaths, ExitRecord } from './agent-state.js';
import type { LogTail } from './log-tail.js';
import type { ProcessHandle } from './process-runner.js';

/** What the agent knows of one attempt it was given, from assignment to reported outcome. */
export interface Run {
  a: AssignmentWire;
  paths: AttemptPaths | null;
  handle: ProcessHandle | null;
  /** Ships its log from the files; the outcome is reported only once it has shipped all of it. */
  tail: LogTail | null;
  /** The server has the whole log (or refused the rest for good): the outcome may go. */
  logShipped?: boolean;
  /** Set when the server refused part of the log: the files' sizes, sent with the outcome so the log says what is missing. */
  logBytes?: { stdout: number; stderr: number };
  /** Why the agent stopped caring: the server decided, or will. Nothing is reported once set. */
  dropped: string | null;
  /** Aborted with `dropped`: withdraws whatever of this attempt still waits in the reporter. */
  withdraw: AbortController;
  /** Set once the process is over; from then on the run is an outcome waiting to be delivered. */
  exit: ExitRecord | null;
  uploaded: Map<string, number>;
  delivering: Promise<void> | null;
  /** When uploading its outputs first failed; it is given up after a while (the reporter does the same for the outcome). */
  firstDeliveryFailure?: number;
  task: Promise<void>;
}

export function newRun(a: AssignmentWire): Run {
  return {
    a,
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
