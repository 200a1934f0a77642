import { type AttemptEnd, AttemptEndKind } from './attempt-end.js';

/**
 * What an attempt's end means for its stage, by kind: the one place retries are decided (the
 * advancer reads it; nothing reads the wording of a detail). As River's `JobCancel`, Temporal's
 * `NonRetryableErrorTypes` and BullMQ's `UnrecoverableError`, the decision travels as a type.
 */
export const EndDisposition = {
  /** The stage's own failure: retried after a backoff while the user's budget (retry.maxAttempts)
   *  lasts; `retry.onExitCodes` narrows it for plain exits with a code. */
  retry: 'retry',
  /** Fails the stage for good: another attempt would end the same way. */
  fail: 'fail',
  /** Not the stage's fault: back to the queue at once, against the infrastructure budget (retry.maxLost). */
  requeue: 'requeue',
  /** Made room for others: back to the queue after its grace, charged to no budget. */
  requeueFree: 'requeue-free',
} as const;
export type EndDisposition = (typeof EndDisposition)[keyof typeof EndDisposition];

export const attemptEndPolicy: Readonly<Record<AttemptEndKind, EndDisposition>> = {
  // A non-zero exit is the user's program failing: what retries are for (onExitCodes filters it).
  exited: EndDisposition.retry,
  // A crash or an unasked signal may not repeat (a flaky node, a race): worth another attempt.
  signaled: EndDisposition.retry,
  // As Temporal's start-to-close timeout and a Kubernetes Job's activeDeadline per pod: the work
  // may have been slow this once (a busy disk, a slow input); the user's budget bounds it.
  timeout: EndDisposition.retry,
  // The command does not exist or cannot be executed: the same spec fails the same way every time.
  [AttemptEndKind.spawnFailed]: EndDisposition.fail,
  // Fetching an upstream's committed files can fail for a passing reason (the server restarting).
  [AttemptEndKind.inputsFailed]: EndDisposition.retry,
  // The upload of outputs can fail for a passing reason too; the stage runs again to make them.
  [AttemptEndKind.outputsFailed]: EndDisposition.retry,
  // An agent that kills its own attempt (stopping, or cut off from the server past its grace)
  // reports it as a failure, as it always did; a cancel never comes here (the attempt is canceled
  // with its job, and no outcome moves the DAG after that).
  killed: EndDisposition.retry,
  // As Kubernetes (an OOMKilled pod counts against backoffLimit) and Slurm (OUT_OF_MEMORY is a
  // failure, not a requeue): the stage asked for too little memory; retrying spends the user's
  // budget, not the cluster's, and a larger request is the fix.
  [AttemptEndKind.oomKilled]: EndDisposition.retry,
  // The machine or lease was lost: the infrastructure's budget, as before (docs/state-machines.md).
  lost: EndDisposition.requeue,
  // Preemption is the cluster's choice (docs/scheduling.md): never charged.
  preempted: EndDisposition.requeueFree,
};

/**
 * Whether a `retry` end is retried under the stage's policy: `onExitCodes` names the exit codes
 * worth retrying, so it applies to plain exits that have a code; every other kind is retried as it
 * always was.
 */
export function retriedUnderPolicy(o: { end: AttemptEndKind; exitCode: number | null }, onExitCodes: readonly number[] | null): boolean {
  if (attemptEndPolicy[o.end] !== EndDisposition.retry) return false;
  if (o.end === AttemptEndKind.exited && o.exitCode !== null && onExitCodes) return onExitCodes.includes(o.exitCode);
  return true;
}

/**
 * An outcome is a success only when it is a plain exit 0 with nothing said beside it: an agent that
 * adds a detail to an exit 0 says something went wrong after it (protocol 1 reported an upload
 * that failed after exit 0 that way).
 */
export function isSuccessfulEnd(o: { exitCode: number | null; signal: string | null; end: AttemptEnd }): boolean {
  return o.end.kind === AttemptEndKind.exited && o.exitCode === 0 && o.signal === null && o.end.detail === null;
}
