import type { RerunPlanView } from '../../api/contract/rerun.js';
import { formatBytes } from './format-bytes.js';
import { formatDuration } from './format-duration.js';
import { palette } from './palette.js';
import { plainTable } from './plain-table.js';
import type { RenderOptions } from './stage-table.js';

/** "48.0" GPU-hours: one decimal; below a tenth, two significant digits (a short stage still shows). */
export function formatGpuHours(h: number): string {
  return h > 0 && h < 0.1 ? h.toPrecision(2) : h.toFixed(1);
}

/**
 * A rerun's plan (`gantry rerun`, before it starts or instead, with --dry-run): every stage, reused
 * (from which job and attempt, what its run cost) or run again (chosen, or downstream of which),
 * then what the reuse saves.
 */
export function renderRerunPlan(plan: RerunPlanView, stages: readonly string[], opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const reused = new Map(plan.reused.map((r) => [r.stage, r]));
  const runs = new Map(plan.rerun.map((r) => [r.stage, r]));
  const rows = stages.map((name) => {
    const r = reused.get(name);
    if (r) {
      return [
        name,
        c.green('reused'),
        `${r.fromJob}${r.attemptId ? ` (${r.attemptId})` : ''}`,
        formatDuration(r.runSeconds * 1000),
        r.gpus ? String(r.gpus) : '-',
        r.gpus ? formatGpuHours(r.gpuHours) : '-',
        `${r.files} file${r.files === 1 ? '' : 's'}, ${formatBytes(r.bytes)}`,
      ];
    }
    const x = runs.get(name);
    return [name, c.yellow('runs'), c.dim(x?.because ? `downstream of ${x.because}` : 'chosen'), '-', '-', '-', ''];
  });
  const table = plainTable(
    ['STAGE', 'PLAN', 'OUTPUTS FROM', 'RUN TIME', 'GPUS', 'GPU-HOURS', 'REUSED'].map((h) => c.bold(h)),
    rows,
  );
  const saved = `saves ${formatGpuHours(plan.gpuHoursSaved)} GPU-hours and ${formatDuration(plan.runSecondsSaved * 1000)} of stage run time (${plan.reused.length} stage${plan.reused.length === 1 ? '' : 's'} reused, ${plan.rerun.length} run again)`;
  return `rerun of ${plan.jobId} from ${plan.from.join(', ')}${plan.canceled ? ' (canceled first)' : ''}\n\n${table}\n\n${saved}`;
}
