import type { JobView } from '../../api/contract/job-view';
import { isTerminalJobState } from '../../api/contract/states';

/** What "Rerun from here" may offer for a stage: a rerun, a rerun of a job canceled first, or nothing. */
export type RerunOffer = 'rerun' | 'cancel-and-rerun' | null;

/**
 * Which rerun from `stage` the server would take, by the rules of the rerun route
 * (planRerun, src/advancer/rerun-plan.ts) that the job view shows: a rerun starts from an ended
 * job, or from a running one canceled first in the same request (`cancelRunning`); and every stage
 * it reuses (all but `stage` and the stages downstream of it) must have succeeded, a stage not
 * ended counting as canceled, as the cancel would leave it. Null: the server would refuse, so
 * nothing is offered. What the view cannot show (reused outputs released or gone) the server
 * still decides: the dialog asks it for the plan before anything is made.
 */
export function rerunOffer(job: Pick<JobView, 'state' | 'stages'>, stage: string): RerunOffer {
  if (!job.stages.some((s) => s.name === stage)) return null;
  const runs = new Set([stage]);
  for (let grew = true; grew;) {
    grew = false;
    for (const s of job.stages) {
      if (!runs.has(s.name) && s.needs.some((n) => runs.has(n))) {
        runs.add(s.name);
        grew = true;
      }
    }
  }
  const reusable = job.stages.every((s) => runs.has(s.name) || s.state === 'succeeded');
  if (!reusable) return null;
  return isTerminalJobState(job.state) ? 'rerun' : 'cancel-and-rerun';
}
