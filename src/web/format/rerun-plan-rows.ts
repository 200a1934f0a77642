import type { RerunPlanView } from '../../api/contract/rerun';
import { formatBytes } from './format-quantity';
import { formatDuration } from './format-time';

/** One stage of a rerun's plan as the dialog lists it. */
export type RerunPlanRow =
  | { stage: string; plan: 'reused'; fromJob: string; attemptId: string | null; ran: string; gpuHours: string; outputs: string }
  | { stage: string; plan: 'runs'; why: string };

/**
 * "48.0" GPU-hours: one decimal; below a tenth, two significant digits, so a short stage still
 * shows. The same rule as `gantry rerun` prints (src/cli/render/rerun-plan.ts), kept here because
 * the dashboard may import only the contract, and the two must read alike.
 */
export function formatGpuHours(h: number): string {
  return h > 0 && h < 0.1 ? h.toPrecision(2) : h.toFixed(1);
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * The plan, every stage in the job's order (`stages`: the original's stage names): reused ones with
 * the job and attempt whose outputs they take, what that run cost and what is reused; the ones
 * that run again, chosen or downstream of which. A stage the plan does not name (it never should)
 * is listed as running, not dropped, so the dialog never hides a stage.
 */
export function rerunPlanRows(plan: RerunPlanView, stages: readonly string[]): RerunPlanRow[] {
  const reused = new Map(plan.reused.map((r) => [r.stage, r]));
  const runs = new Map(plan.rerun.map((r) => [r.stage, r]));
  return stages.map((stage): RerunPlanRow => {
    const r = reused.get(stage);
    if (r) {
      return {
        stage,
        plan: 'reused',
        fromJob: r.fromJob,
        attemptId: r.attemptId,
        ran: formatDuration(r.runSeconds * 1000),
        gpuHours: r.gpus ? `${formatGpuHours(r.gpuHours)} (${plural(r.gpus, 'GPU')})` : '–',
        outputs: `${plural(r.files, 'file')}, ${formatBytes(r.bytes)}`,
      };
    }
    const because = runs.get(stage)?.because;
    return { stage, plan: 'runs', why: because ? `downstream of ${because}` : 'chosen' };
  });
}

/** "Saves 1.5 GPU-hours and 2 h 05 min of stage run time: 2 stages reused, 1 runs again." */
export function rerunSavings(plan: RerunPlanView): string {
  const runs = plan.rerun.length;
  return (
    `Saves ${formatGpuHours(plan.gpuHoursSaved)} GPU-hours and ${formatDuration(plan.runSecondsSaved * 1000)} of stage run time: ` +
    `${plural(plan.reused.length, 'stage')} reused, ${runs} ${runs === 1 ? 'runs' : 'run'} again.`
  );
}
