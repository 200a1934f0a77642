import type { StageView } from './job-view.js';

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
