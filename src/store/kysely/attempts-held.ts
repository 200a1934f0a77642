import type { HeldAttempt } from '../records.js';
import { toAttempt } from './row-mappers.js';
import type { Db } from './tx-context.js';

/**
 * Every attempt that holds resources on its machine now, with its job's name and team: what runs
 * where (the dashboard's machines page). Read through the partial index of held attempts
 * (`attempts_held`), so it costs what runs, not the history.
 */
export async function attemptsHeld(db: Db): Promise<HeldAttempt[]> {
  const rows = await db
    .selectFrom('attempts')
    .innerJoin('jobs', 'jobs.id', 'attempts.job_id')
    .leftJoin('machines', 'machines.id', 'attempts.machine_id')
    .selectAll('attempts')
    .select(['jobs.name as job_name', 'jobs.team as job_team', 'machines.name as machine_name'])
    .where('attempts.released_at', 'is', null)
    .orderBy('attempts.scheduled_at')
    .orderBy('attempts.id')
    .execute();
  return rows.map(({ job_name, job_team, machine_name, ...a }) => ({ ...toAttempt(a, machine_name ?? a.machine_id), jobName: job_name, team: job_team }));
}
