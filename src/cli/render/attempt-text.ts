import type { AttemptView, StageView } from '../../api/contract/job-view.js';
import { attemptCountText } from '../../api/contract/attempts-counted.js';
import { formatBytes } from './format-bytes.js';

/** "2/3" (attemptCountText), or "reused" for a stage a rerun reused, "-" before any attempt. */
export function attemptText(stage: StageView): string {
  // A stage a rerun reused ran no attempt in this job (docs/rerun.md).
  if (stage.reused) return 'reused';
  return attemptCountText(stage) || '-';
}

/** "h100:0,1" (type and device indices), or "0,1" when the type is unknown; a share "0.25 of h100:0". */
export function gpuText(attempt: Pick<AttemptView, 'gpus' | 'gpuType' | 'gpuShare'> | undefined): string {
  if (!attempt || attempt.gpus.length === 0) return '-';
  const indices = attempt.gpus.join(',');
  const gpus = attempt.gpuType ? `${attempt.gpuType}:${indices}` : indices;
  return attempt.gpuShare ? `${attempt.gpuShare.milli / 1000} of ${gpus}` : gpus;
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
