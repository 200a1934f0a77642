import type { AttemptView, StageView } from '../../api/contract/job-view.js';
import { attemptsCounted } from '../../api/contract/attempts-counted.js';
import { formatBytes } from './format-bytes.js';

export function latestAttempt(stage: StageView): AttemptView | undefined {
  let latest: AttemptView | undefined;
  for (const a of stage.attempts) if (!latest || a.number > latest.number) latest = a;
  return latest;
}

/**
 * "2/3": attempts counted against the retry budget, including the one under way, out of the
 * maximum. Lost and preempted attempts are the infrastructure's fault and do not count, so they
 * are shown apart ("0/3 +1 preempted": requeued after a preemption, nothing used of its budget),
 * or "0/3" alone would read as if the stage had never run.
 */
export function attemptText(stage: StageView): string {
  // A stage a rerun reused ran no attempt in this job (docs/rerun.md).
  if (stage.reused) return 'reused';
  if (!latestAttempt(stage)) return '-';
  const preempted = stage.attempts.filter((a) => a.state === 'preempted').length;
  const apart = [stage.lostUsed > 0 ? `+${stage.lostUsed} lost` : '', preempted > 0 ? `+${preempted} preempted` : ''].filter(Boolean);
  return [`${attemptsCounted(stage)}/${stage.maxAttempts}`, ...apart].join(' ');
}

/**
 * The attempt whose machine, GPUs and time a stage's row shows: its latest, unless the stage waits
 * for a machine again (requeued after a preemption, a loss or a failure): then it has none, and
 * the old attempt's machine and GPUs would read as where it runs.
 */
export function placedAttempt(stage: StageView): AttemptView | undefined {
  return stage.state === 'pending' || stage.state === 'ready' ? undefined : latestAttempt(stage);
}

/** "h100:0,1" (type and device indices), or "0,1" when the type is unknown. */
export function gpuText(attempt: AttemptView | undefined): string {
  if (!attempt || attempt.gpus.length === 0) return '-';
  const indices = attempt.gpus.join(',');
  return attempt.gpuType ? `${attempt.gpuType}:${indices}` : indices;
}

/**
 * "log cut: 36.0 MiB dropped": its log passed the head's cap and that much between its head and its
 * tail was dropped (a line in the log marks where; docs/agent.md, "Logs"); "" when its log is whole.
 */
export function logCutText(attempt: Pick<AttemptView, 'logCutBytes'>): string {
  return attempt.logCutBytes ? `log cut: ${formatBytes(attempt.logCutBytes)} dropped` : '';
}

/**
 * "peak 212 MiB, 3.1 CPU s": what an attempt used, measured from its cgroup when it ended
 * (docs/containment.md); the part its agent could not measure is left out, "-" when neither.
 */
export function usageText(attempt: Pick<AttemptView, 'memoryPeakBytes' | 'cpuSeconds'> | undefined): string {
  const parts: string[] = [];
  if (attempt?.memoryPeakBytes != null) parts.push(`peak ${formatBytes(attempt.memoryPeakBytes)}`);
  if (attempt?.cpuSeconds != null) parts.push(`${attempt.cpuSeconds.toFixed(1)} CPU s`);
  return parts.length ? parts.join(', ') : '-';
}
