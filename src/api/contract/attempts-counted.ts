import type { AttemptView, StageView } from './job-view.js';

/**
 * A stage's attempts counted against its retry budget, the one under way included: what "2/3"
 * says, in the CLI and the dashboard alike. Failed attempts are in `attemptsUsed` already; lost
 * and preempted ones never count (the infrastructure's fault, shown apart: `lostUsed`).
 */
export function attemptsCounted(stage: Pick<StageView, 'attempts' | 'attemptsUsed'>): number {
  let latest: StageView['attempts'][number] | undefined;
  for (const a of stage.attempts) if (!latest || a.number > latest.number) latest = a;
  if (!latest) return 0;
  return stage.attemptsUsed + (latest.state !== 'failed' && latest.state !== 'lost' && latest.state !== 'preempted' ? 1 : 0);
}

/** A stage's latest attempt (the highest number), if any. */
export function latestAttempt(stage: Pick<StageView, 'attempts'>): AttemptView | undefined {
  let latest: AttemptView | undefined;
  for (const a of stage.attempts) if (!latest || a.number > latest.number) latest = a;
  return latest;
}

/**
 * "2/3": attempts counted against the retry budget, including the one under way, out of the
 * maximum. Lost and preempted attempts are the infrastructure's fault and do not count, so they
 * are shown apart ("0/3 +1 preempted": requeued after a preemption, nothing used of its budget),
 * or "0/3" alone would read as if the stage had never run. "" when it has no attempt. The CLI's
 * and the dashboard's words.
 */
export function attemptCountText(stage: Pick<StageView, 'attempts' | 'attemptsUsed' | 'maxAttempts' | 'lostUsed'>): string {
  if (!latestAttempt(stage)) return '';
  const preempted = stage.attempts.filter((a) => a.state === 'preempted').length;
  const apart = [stage.lostUsed > 0 ? `+${stage.lostUsed} lost` : '', preempted > 0 ? `+${preempted} preempted` : ''].filter(Boolean);
  return [`${attemptsCounted(stage)}/${stage.maxAttempts}`, ...apart].join(' ');
}

/**
 * The attempt whose machine, GPUs and time a stage's row shows: its latest, unless the stage waits
 * for a machine again (requeued after a preemption, a loss or a failure): then it has none, and
 * the old attempt's machine and GPUs would read as where it runs.
 */
export function placedAttempt(stage: Pick<StageView, 'attempts' | 'state'>): AttemptView | undefined {
  return stage.state === 'pending' || stage.state === 'ready' ? undefined : latestAttempt(stage);
}
