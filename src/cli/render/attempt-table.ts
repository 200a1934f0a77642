import type { AttemptView, JobView } from '../../api/contract/job-view.js';
import { logCutText, usageText } from './attempt-text.js';
import { formatDuration } from './format-duration.js';
import { palette } from './palette.js';
import { plainTable } from './plain-table.js';
import type { RenderOptions } from './stage-table.js';
import { colorState } from './state-color.js';

/** Rows past which a long job's succeeded attempts are left out (`--json` has them all). */
export const MAX_ATTEMPT_ROWS = 50;

/**
 * Every attempt of a job, in stage order, as `gantry status` shows them below the stages: how
 * each ended, what it used (its memory's peak and CPU seconds, where its agent measured them), and
 * the detail of an end in full, an `oom-killed` one's included (which request to raise), and
 * whether its log was cut past the head's cap (how much was dropped). A long
 * job's succeeded attempts are left out first; past MAX_ATTEMPT_ROWS the rest is counted. "" when
 * nothing ran.
 */
export function renderAttemptTable(job: JobView, now: number, opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const all = job.stages.flatMap((s) => [...s.attempts].sort((a, b) => a.number - b.number).map((a) => ({ stage: s.name, a })));
  if (all.length === 0) return '';
  let shown = all;
  if (shown.length > MAX_ATTEMPT_ROWS) shown = shown.filter((r) => r.a.state !== 'succeeded');
  const left = all.length - Math.min(shown.length, MAX_ATTEMPT_ROWS);
  shown = shown.slice(0, MAX_ATTEMPT_ROWS);
  const rows = shown.map(({ stage, a }) => [
    stage,
    // A gang's members share the number: each row says whose it is.
    a.gangRank === undefined ? String(a.number) : `${a.number} rank ${a.gangRank}`,
    colorState(a.state, c),
    a.machine,
    endText(a),
    a.startedAt === null ? '-' : formatDuration((a.finishedAt ?? now) - a.startedAt),
    usageText(a),
    [a.reason === null ? '' : a.state === 'succeeded' ? c.dim(a.reason) : c.red(a.reason), c.yellow(logCutText(a))].filter((t) => t !== '').join('; '),
  ]);
  const table = plainTable(
    ['STAGE', '#', 'STATE', 'MACHINE', 'END', 'RAN', 'USAGE', 'DETAIL'].map((h) => c.bold(h)),
    rows,
  );
  return left > 0 ? `${table}\n${c.dim(`(${left} more attempt${left === 1 ? '' : 's'} not shown, succeeded ones first; --json has every attempt)`)}` : table;
}

/** How it ended, in a word: "exit 0", "SIGKILL", or the kind beyond the process's own end ("oom-killed", "timeout", "lost"); "-" while it runs. */
function endText(a: AttemptView): string {
  if (a.endKind && a.endKind !== 'exited' && a.endKind !== 'signaled') return a.endKind;
  if (a.signal) return a.signal;
  if (a.exitCode !== null) return `exit ${a.exitCode}`;
  return a.endKind ?? '-';
}
