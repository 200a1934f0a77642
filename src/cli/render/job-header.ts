import type { JobView } from '../../api/contract/job-view.js';
import { formatAge } from './format-age.js';
import { formatDuration } from './format-duration.js';
import { palette } from './palette.js';
import type { RenderOptions } from './stage-table.js';
import { colorState } from './state-color.js';
import { isTerminalJobState } from '../../api/contract/states.js';

/** The lines above the stage table in `gantry status`. */
export function renderJobHeader(job: JobView, now: number, opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const elapsed = formatDuration((job.finishedAt ?? now) - job.createdAt);
  const lines: [string, string][] = [
    ['job', job.id],
    ['name', job.name],
    ['team', job.team],
    ['priority', String(job.priority)],
    [
      'state',
      `${colorState(job.state, c)}  ${c.dim(`${elapsed} ${job.finishedAt === null ? 'elapsed' : 'total'}, submitted ${formatAge(job.createdAt, now)} ago`)}`,
    ],
  ];
  if (job.failureReason) lines.push(['reason', c.red(job.failureReason)]);
  if (job.rerunOf) lines.push(['rerun of', `${job.rerunOf}${job.rerunFrom?.length ? ` (from ${job.rerunFrom.join(', ')})` : ''}`]);
  if (job.reruns?.length) lines.push(['reruns', job.reruns.join(', ')]);
  if (job.cancelRequestedAt !== null && !isTerminalJobState(job.state)) {
    lines.push(['cancel', `requested ${formatAge(job.cancelRequestedAt, now)} ago; stopping running stages`]);
  }
  const labels = Object.entries(job.labels);
  if (labels.length > 0) lines.push(['labels', labels.map(([k, v]) => `${k}=${v}`).join(',')]);
  return lines.map(([k, v]) => `${c.bold(`${k}:`.padEnd(10))}${v}`).join('\n');
}
