import type { JobView } from '../../api/contract/job-view.js';
import { placedAttempt } from '../../api/contract/attempts-counted.js';
import { attemptText, gpuText } from './attempt-text.js';
import { formatDuration } from './format-duration.js';
import { palette } from './palette.js';
import { plainTable } from './plain-table.js';
import { stageReason } from './stage-reason.js';
import { colorState } from './state-color.js';

export interface RenderOptions {
  /** Force colours on or off; by default picocolors decides (NO_COLOR, TTY). */
  color?: boolean;
}

/** The stages of a job, one row each, as `gantry status` and `gantry submit --watch` show them. */
export function renderStageTable(job: JobView, now: number, opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const rows = job.stages.flatMap((stage) => {
    const attempt = placedAttempt(stage);
    const started = attempt?.startedAt ?? null;
    const elapsed = started === null ? '-' : formatDuration((attempt?.finishedAt ?? now) - started);
    const reason = stageReason(job, stage, now);
    // A placed gang (docs/gangs.md): the stage's row says how many machines; a row per member below
    // says each one's machine, GPUs and state, rank 0 (the rendezvous master) first.
    const members = attempt && stage.members?.length ? stage.members : null;
    const row = [
      stage.name,
      colorState(stage.state, c),
      members ? `${members.length} machines` : (attempt?.machine ?? '-'),
      members ? '-' : gpuText(attempt),
      attemptText(stage),
      elapsed,
      stage.state === 'failed' ? c.red(reason) : c.dim(reason),
    ];
    const memberRows = (members ?? []).map((m) => [
      c.dim(`  rank ${m.rank}`),
      colorState(m.state, c),
      m.machine,
      gpuText({ gpus: m.gpus, gpuType: m.gpuType }),
      '',
      '',
      '',
    ]);
    return [row, ...memberRows];
  });
  return plainTable(
    ['STAGE', 'STATE', 'MACHINE', 'GPUS', 'ATTEMPT', 'ELAPSED', 'REASON'].map((h) => c.bold(h)),
    rows,
  );
}
