import type { JobView, StageView } from '../../api/contract/job-view.js';
import { formatDuration } from './format-duration.js';
import { latestAttempt } from '../../api/contract/attempts-counted.js';

/** The one line that answers "why is this stage where it is?", or "" when nothing needs saying. */
export function stageReason(job: JobView, stage: StageView, now: number): string {
  if (stage.state === 'pending') {
    if (stage.pendingReason) return stage.pendingReason;
    const waiting = stage.needs.filter((n) => job.stages.find((s) => s.name === n)?.state !== 'succeeded');
    return waiting.length > 0 ? `waiting for ${waiting.join(', ')}` : '';
  }
  if (stage.state === 'ready') {
    if (stage.notBefore !== null && stage.notBefore > now) {
      // The server's reason ends with an absolute UTC deadline; a countdown reads better here.
      const why = stage.pendingReason?.replace(/: backing off until \S+$/, '');
      // Under a second reads "00:00" as a stopwatch, which says "now" and is not quite: say so.
      const left = stage.notBefore - now;
      const countdown = `next try in ${left < 1000 ? '<1 s' : formatDuration(left)}`;
      return why ? `${why}; ${countdown}` : countdown;
    }
    return stage.pendingReason ?? '';
  }
  if (stage.reused) return `reused from ${stage.reused.jobId}${stage.reused.attemptId ? ` (${stage.reused.attemptId})` : ''}`;
  if (stage.outputsReleasedAt) return 'outputs released: the artifact store was over its size budget';
  if (stage.endReason) return stage.endReason;
  const latest = latestAttempt(stage);
  if (stage.state === 'running' && latest?.progress) return progressBar(latest.progress.fraction, latest.progress.message);
  if (stage.state === 'failed' && latest) {
    // A kind beyond the process's own end (timeout, spawn-failed, lost…) is the decision's reason: say it first.
    if (latest.endKind && latest.endKind !== 'exited' && latest.endKind !== 'signaled')
      return latest.reason ? `${latest.endKind}: ${latest.reason}` : latest.endKind;
    if (latest.signal) return `killed by ${latest.signal}`;
    if (latest.exitCode !== null) return `exit ${latest.exitCode}`;
    if (latest.reason) return latest.reason;
  }
  return '';
}

/** What a running stage said of its progress (GANTRY_PROGRESS_FILE): `[######····] 60% epoch 6/10`. */
export function progressBar(fraction: number, message: string | null, width = 10): string {
  const f = Math.min(1, Math.max(0, fraction));
  const full = Math.round(f * width);
  return `[${'#'.repeat(full)}${'·'.repeat(width - full)}] ${Math.round(f * 100)}%${message ? ` ${message}` : ''}`;
}
