import { useState } from 'react';
import { Link, useNavigate } from 'react-router';
import type { JobView } from '../../api/contract/job-view';
import type { RerunPlanView } from '../../api/contract/rerun';
import { isTerminalJobState } from '../../api/contract/states';
import { ApiError } from '../api/api-client';
import { newIdempotencyKey } from '../api/idempotency-key';
import { useRerun, useRerunPlan } from '../api/queries';
import { ConfirmDialog } from '../components/confirm-dialog';
import { ReusedBadge } from '../components/reused-badge';
import { TableHead } from '../components/table-head';
import { rerunPlanRows, rerunSavings } from '../format/rerun-plan-rows';
import { jobPath } from './job-path';

/**
 * "Rerun from here", or "Cancel and rerun from here" on a job not ended (docs/rerun.md): the server's plan for a rerun from `stage` first (a dry run:
 * what is reused, what runs again and why, what it saves), or its refusal in its own words; then,
 * confirmed, the rerun, and the new job's page. Mounted while open: each opening is one request
 * to the user, with its own Idempotency-Key.
 */
export function RerunDialog({ job, stage, cancelFirst: asked = false, onClose }: { job: JobView; stage: string; cancelFirst?: boolean; onClose: () => void }) {
  const ended = isTerminalJobState(job.state);
  // Opened as "Cancel and rerun from here": ticked from the start (the box still shows what it does).
  const [cancelFirst, setCancelFirst] = useState(asked);
  // One key per opened dialog and body: a double click, or "try again" after an answer that never
  // came, makes one job. Ticking "cancel first" is another request, so it has its own key.
  const [keys] = useState(() => ({ plain: newIdempotencyKey(), cancel: newIdempotencyKey() }));
  // A job that ends while the dialog is open needs no cancel: the box goes, and its plan is the plain one.
  const cancelRunning = !ended && cancelFirst;
  const plan = useRerunPlan(job.id, stage, cancelRunning, true);
  const rerun = useRerun(job.id);
  const navigate = useNavigate();
  const confirm = () =>
    rerun.mutate(
      { stage, cancelRunning, key: cancelRunning ? keys.cancel : keys.plain },
      {
        onSuccess: (r) => {
          onClose();
          if (r.job) void navigate(jobPath(r.job.id, stage));
        },
      },
    );
  return (
    <ConfirmDialog
      open
      wide
      tone="primary"
      title={`Rerun ${job.name} from ${stage}?`}
      confirm={cancelRunning ? `Cancel it and rerun from ${stage}` : `Rerun from ${stage}`}
      cancel="Not now"
      busy={rerun.isPending}
      confirmDisabled={!plan.data || plan.isError}
      onClose={onClose}
      onConfirm={confirm}
    >
      <p>
        A new job is made from this one. <strong>{stage}</strong> and every stage downstream of it run again; every other stage is <em>reused</em>: it does not
        run, and its committed outputs are used as they are (nothing is copied). This job is kept as it is{ended ? '' : ', unless you cancel it below'}.
      </p>
      {!ended ? (
        <div className="rerun-cancel">
          <label>
            <input type="checkbox" checked={cancelFirst} onChange={(e) => setCancelFirst(e.target.checked)} /> <strong>Cancel this job first</strong>
          </label>
          <p className="muted">
            It is {job.state}, and a rerun starts from an ended job. Ticked, the job is canceled and rerun in one step: its running stages are stopped (TERM, a
            grace period, then KILL), the stages that already succeeded are reused, and the others run again in the new job.
          </p>
        </div>
      ) : null}
      {plan.error ? (
        <Refusal error={plan.error} retry={() => void plan.refetch()} />
      ) : plan.data ? (
        <PlanTable plan={plan.data} stages={job.stages.map((s) => s.name)} onLeave={onClose} />
      ) : (
        <p className="muted" role="status">
          Asking the server for the plan…
        </p>
      )}
      {rerun.error ? <Refusal error={rerun.error} /> : null}
    </ConfirmDialog>
  );
}

/**
 * The server's refusal, in its own words: a job not ended (409), outputs to reuse that are gone
 * (409), a stage it does not have (400), or a server out of reach. A refusal is an answer, so
 * "try again" is offered only where the server did not answer one.
 */
function Refusal({ error, retry }: { error: Error; retry?: () => void }) {
  const refused = error instanceof ApiError && error.status >= 400 && error.status < 500;
  return (
    <div className="error-note" role="alert" data-testid="rerun-refused">
      <span>
        {refused ? 'The server refuses: ' : ''}
        {error.message}
      </span>
      {retry && !refused ? (
        <button type="button" className="button button-small" onClick={retry}>
          Try again
        </button>
      ) : null}
    </div>
  );
}

/** Every stage, in the job's order: reused (from which job and attempt, what its run cost, what is reused) or run again (and why). */
function PlanTable({ plan, stages, onLeave }: { plan: RerunPlanView; stages: string[]; onLeave: () => void }) {
  return (
    <div data-testid="rerun-plan">
      <div className="table-wrap">
        <table className="table rerun-plan">
          <TableHead columns={['Stage', 'Plan', 'Outputs from', 'Ran', 'GPU-hours', 'Reused']} />
          <tbody>
            {rerunPlanRows(plan, stages).map((r) =>
              r.plan === 'reused' ? (
                <tr key={r.stage} data-plan-stage={r.stage} data-plan="reused">
                  <td>{r.stage}</td>
                  <td>
                    <ReusedBadge />
                  </td>
                  <td>
                    <Link className="id" to={jobPath(r.fromJob, r.stage)} onClick={onLeave} title={r.attemptId ? `attempt ${r.attemptId}` : undefined}>
                      {r.fromJob}
                    </Link>
                  </td>
                  <td>{r.ran}</td>
                  <td>{r.gpuHours}</td>
                  <td>{r.outputs}</td>
                </tr>
              ) : (
                <tr key={r.stage} data-plan-stage={r.stage} data-plan="runs">
                  <td>{r.stage}</td>
                  <td>
                    <span className="badge state-ready">runs</span>
                  </td>
                  <td colSpan={4} className="muted">
                    {r.why}
                  </td>
                </tr>
              ),
            )}
          </tbody>
        </table>
      </div>
      <p className="rerun-savings">{rerunSavings(plan)}</p>
    </div>
  );
}
