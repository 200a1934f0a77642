import type { JobView } from '../../api/contract/job-view.js';
import { formatDuration } from './format-duration.js';
import type { Colors } from './palette.js';
import { colorState } from './state-color.js';

/** "resnet-pipeline  running  1/3 stages succeeded  00:12 elapsed": the top line of a watch. */
export function progressLine(job: JobView, now: number, c: Colors): string {
  const done = job.stages.filter((s) => s.state === 'succeeded').length;
  const elapsed = formatDuration((job.finishedAt ?? now) - job.createdAt);
  return [c.bold(job.name), colorState(job.state, c), `${done}/${job.stages.length} stages succeeded`, `${elapsed} elapsed`].join('  ');
}
