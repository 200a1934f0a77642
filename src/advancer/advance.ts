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
  | { kind: 'failed'; exitCode: number | null; signal: string | null; reason: string | null }
  /** `charged: false`: stopped by an operator (drain --now), not the machine's fault nor the stage's: no budget is used. */
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

export function describeFailure(o: { exitCode: number | null; signal: string | null; reason: string | null }): string {
  if (o.reason) return o.reason;
  if (o.signal) return `killed by ${o.signal}`;
  return `exit code ${o.exitCode}`;
}

/** Failures worth retrying: a command that could not even be spawned will not start next time. */
function isRetryable(outcome: Extract<AttemptOutcome, { kind: 'failed' }>, retry: RetryPolicy): boolean {
  if (outcome.reason?.startsWith('spawn failed')) return false;
  if (outcome.exitCode !== null && outcome.signal === null && outcome.reason === null && retry.onExitCodes) {
    return retry.onExitCodes.includes(outcome.exitCode);
  }
  return true;
}

export function advance(
  stages: readonly StageNode[],
  trigger: { stage: string; outcome: AttemptOutcome },
  now: number,
  jitter: number,
): StageChange[] {
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

  if (o.kind === 'preempted') {
    // Not a failure: no budget is used, and the stage goes back to its queue even while the job
    // fails elsewhere only if nothing failed (a failing job starts nothing new).
    if (!jobFailing) {
      move(me.name, 'ready', o.reason, { notBefore: o.notBefore });
      return changes;
    }
    move(me.name, 'failed', `${o.reason}; not requeued because the job is failing`);
  } else if (o.kind === 'queue-timeout') {
    move(me.name, 'failed', o.reason);
  } else if (o.kind === 'lost') {
    const lostUsed = me.lostUsed + (o.charged === false ? 0 : 1);
    if (lostUsed <= me.retry.maxLost && !jobFailing) {
      move(me.name, 'ready', `attempt lost: ${o.reason}`, { lostUsed, notBefore: now });
      return changes;
    }
    const why = jobFailing
      ? `attempt lost (${o.reason}) while the job is failing`
      : `lost ${lostUsed} times, over its infrastructure budget of ${me.retry.maxLost} (last: ${o.reason})`;
    move(me.name, 'failed', why, { lostUsed });
  } else {
    const attemptsUsed = me.attemptsUsed + 1;
    const what = describeFailure(o);
    if (!jobFailing && attemptsUsed < me.retry.maxAttempts && isRetryable(o, me.retry)) {
      const notBefore = now + backoffMs(me.retry.backoff, attemptsUsed, jitter);
      move(me.name, 'ready', `attempt ${attemptsUsed} failed (${what}); retrying`, { attemptsUsed, notBefore });
      return changes;
    }
    const why =
      attemptsUsed >= me.retry.maxAttempts
        ? `${what}; ${attemptsUsed} of ${me.retry.maxAttempts} attempts used`
        : jobFailing
          ? `${what}; not retried because the job is failing`
          : `${what}; not retryable`;
    move(me.name, 'failed', why, { attemptsUsed });
  }

  // The stage failed for good: skip what depends on it, and everything else that has not started.
  const downstream = dependentsOf(stages, me.name);
  for (const s of byName.values()) {
    if (s.state !== 'pending' && s.state !== 'ready') continue;
    move(
      s.name,
      'skipped',
      downstream.has(s.name)
        ? `upstream stage ${me.name} failed`
        : `job failing: stage ${me.name} failed before this stage started`,
    );
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
