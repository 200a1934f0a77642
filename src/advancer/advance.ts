import type { AttemptEndKind } from '../domain/attempt-end.js';
import { attemptEndPolicy, EndDisposition, retriedUnderPolicy } from '../domain/attempt-end-policy.js';
import type { RetryPolicy } from '../domain/job-definition.js';
import { canTransition } from '../domain/transition-table.js';
import { isStageTerminal, type StageState, stageTransitions } from '../domain/stage-state.js';
import { backoffMs } from './backoff.js';

/**
 * The advancer: how a job's DAG moves when one of its attempts ends. Pure: it takes the job's
 * stages and the outcome, and returns the stage changes to write, which the store applies in the
 * same transaction that records the outcome.
 *
 * Failure policy (as Argo Workflows' default `failFast`): when a stage fails for good, stages that
 * have not started are skipped and nothing new starts, while stages already placed or running
 * finish, so their work is kept; the job becomes `failed` when the last of them ends.
 */
export interface StageNode {
  name: string;
  state: StageState;
  needs: readonly string[];
  /** Attempts already counted against the user's retry budget (before this outcome). */
  attemptsUsed: number;
  /** Attempts already lost to infrastructure (before this outcome). */
  lostUsed: number;
  retry: RetryPolicy;
}

export type AttemptOutcome =
  | { kind: 'succeeded' }
  /** An agent's outcome that is not a success: `end` decides by attemptEndPolicy, `detail` is for people. */
  | { kind: 'failed'; end: AttemptEndKind; exitCode: number | null; signal: string | null; detail: string | null }
  /** The control plane's own ends (kinds `lost` and `preempted`), with what only they carry.
   *  `charged: false`: stopped by an operator (drain --now), not the machine's fault nor the stage's: no budget is used. */
  | { kind: 'lost'; reason: string; charged?: boolean }
  /** A ready stage that waited past its queueTimeoutSeconds: it fails for good (not an attempt; no retry). */
  | { kind: 'queue-timeout'; reason: string }
  /** Stopped for work that outranks it (docs/scheduling.md, "Preemption"): back to the queue once its
   *  grace has passed (`notBefore`), charged to no budget. */
  | { kind: 'preempted'; reason: string; notBefore: number };

export interface StageChange {
  name: string;
  from: StageState;
  to: StageState;
  /** Why, in words, for the stage's `endReason` / event. */
  reason: string | null;
  /** For a retry: not placed before this time. */
  notBefore?: number;
  attemptsUsed?: number;
  lostUsed?: number;
}

export function describeFailure(o: { exitCode: number | null; signal: string | null; detail: string | null }): string {
  if (o.detail) return o.detail;
  if (o.signal) return `killed by ${o.signal}`;
  return `exit code ${o.exitCode}`;
}

/** What the table says of this outcome's end (the control plane's lost and preempted included). */
function dispositionOf(o: Exclude<AttemptOutcome, { kind: 'succeeded' } | { kind: 'queue-timeout' }>): EndDisposition {
  return attemptEndPolicy[o.kind === 'failed' ? o.end : o.kind];
}

export function advance(stages: readonly StageNode[], trigger: { stage: string; outcome: AttemptOutcome }, now: number, jitter: number): StageChange[] {
  const byName = new Map(stages.map((s) => [s.name, { ...s }]));
  const changes: StageChange[] = [];
  const move = (name: string, to: StageState, reason: string | null, extra: Partial<StageChange> = {}) => {
    const s = byName.get(name);
    if (!s || !canTransition(stageTransitions, s.state, to)) return;
    changes.push({ name, from: s.state, to, reason, ...extra });
    s.state = to;
  };
  const me = byName.get(trigger.stage);
  if (!me || isStageTerminal(me.state)) return [];
  const jobFailing = stages.some((s) => s.state === 'failed');
  const o = trigger.outcome;

  if (o.kind === 'succeeded') {
    move(me.name, 'succeeded', null);
    if (!jobFailing) {
      for (const s of byName.values()) {
        if (s.state === 'pending' && s.needs.every((n) => byName.get(n)?.state === 'succeeded')) {
          move(s.name, 'ready', null);
        }
      }
    }
    return changes;
  }

  if (o.kind === 'queue-timeout') {
    move(me.name, 'failed', o.reason);
  } else {
    // Every end goes by the table, whoever reported it: an agent's outcome of kind `lost` is
    // requeued as the reconciler's loss is.
    const disposition = dispositionOf(o);
    const detail = o.kind === 'failed' ? describeFailure(o) : o.reason;
    switch (disposition) {
      case EndDisposition.requeueFree: {
        // Not a failure: no budget is used, and the stage goes back to its queue even while the job
        // fails elsewhere only if nothing failed (a failing job starts nothing new).
        if (!jobFailing) {
          move(me.name, 'ready', detail, { notBefore: o.kind === 'preempted' ? o.notBefore : now });
          return changes;
        }
        move(me.name, 'failed', `${detail}; not requeued because the job is failing`);
        break;
      }
      case EndDisposition.requeue: {
        const lostUsed = me.lostUsed + (o.kind === 'lost' && o.charged === false ? 0 : 1);
        if (lostUsed <= me.retry.maxLost && !jobFailing) {
          move(me.name, 'ready', `attempt lost: ${detail}`, { lostUsed, notBefore: now });
          return changes;
        }
        const why = jobFailing
          ? `attempt lost (${detail}) while the job is failing`
          : `lost ${lostUsed} times, over its infrastructure budget of ${me.retry.maxLost} (last: ${detail})`;
        move(me.name, 'failed', why, { lostUsed });
        break;
      }
      case EndDisposition.retry:
      case EndDisposition.fail: {
        // Both spend an attempt of the user's budget; only `retry` may be tried again.
        const attemptsUsed = me.attemptsUsed + 1;
        const retryable = o.kind === 'failed' && retriedUnderPolicy(o, me.retry.onExitCodes);
        if (!jobFailing && attemptsUsed < me.retry.maxAttempts && retryable) {
          const notBefore = now + backoffMs(me.retry.backoff, attemptsUsed, jitter);
          move(me.name, 'ready', `attempt ${attemptsUsed} failed (${detail}); retrying`, { attemptsUsed, notBefore });
          return changes;
        }
        const why =
          attemptsUsed >= me.retry.maxAttempts
            ? `${detail}; ${attemptsUsed} of ${me.retry.maxAttempts} attempts used`
            : jobFailing
              ? `${detail}; not retried because the job is failing`
              : `${detail}; not retryable`;
        move(me.name, 'failed', why, { attemptsUsed });
        break;
      }
    }
  }

  // The stage failed for good: skip what depends on it, and everything else that has not started.
  const downstream = dependentsOf(stages, me.name);
  for (const s of byName.values()) {
    if (s.state !== 'pending' && s.state !== 'ready') continue;
    move(s.name, 'skipped', downstream.has(s.name) ? `upstream stage ${me.name} failed` : `job failing: stage ${me.name} failed before this stage started`);
  }
  return changes;
}

/** Every stage that needs `root`, directly or not. */
export function dependentsOf(stages: readonly StageNode[], root: string): Set<string> {
  const out = new Set<string>();
  let frontier = [root];
  while (frontier.length) {
    const next: string[] = [];
    for (const s of stages) {
      if (!out.has(s.name) && s.needs.some((n) => frontier.includes(n))) {
        out.add(s.name);
        next.push(s.name);
      }
    }
    frontier = next;
  }
  return out;
}

/** Stages with no needs start ready; the rest wait. */
export function initialStageState(needs: readonly string[]): StageState {
  return needs.length === 0 ? 'ready' : 'pending';
}
