import type { JobSummaryView } from '../../api/contract/job-view.js';
import { formatAge } from './format-age.js';
import { palette } from './palette.js';
import { plainTable } from './plain-table.js';
import type { RenderOptions } from './stage-table.js';
import { colorState } from './state-color.js';

/** `gantry list`: one row per job, newest first as the server sends them. */
export function renderJobList(jobs: JobSummaryView[], now: number, opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const rows = jobs.map((j) => {
    const total = Object.values(j.stageCounts).reduce((a, b) => a + b, 0);
    const succeeded = j.stageCounts.succeeded ?? 0;
    return [j.id, j.name, j.team, colorState(j.state, c), `${succeeded}/${total} succeeded`, formatAge(j.createdAt, now)];
  });
  return plainTable(
    ['ID', 'NAME', 'TEAM', 'STATE', 'STAGES', 'AGE'].map((h) => c.bold(h)),
    rows,
  );
}
