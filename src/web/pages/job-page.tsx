import { useState } from 'react';
import { Link, useParams, useSearchParams } from 'react-router';
import { attemptCountText, placedAttempt } from '../../api/contract/attempts-counted';
import type { JobView, StageView } from '../../api/contract/job-view';
import { ApiError } from '../api/api-client';
import { useCancelJob, useJob } from '../api/queries';
import { isTerminalJobState } from '../../api/contract/states';
import { ConfirmDialog } from '../components/confirm-dialog';
import { EmptyState, ErrorNote } from '../components/empty-state';
import { ProgressBar } from '../components/meter';
import { ReusedBadge } from '../components/reused-badge';
import { StateBadge } from '../components/state-badge';
import { Elapsed, RelativeTime } from '../components/time-text';
import { DagView } from '../dag/dag-view';
import { StagePanel } from './stage-panel';
import { TableHead } from '../components/table-head';
import { formatGpus } from '../format/format-quantity';
import { jobPath } from './job-path';

/** The stage to show when none is picked: what is running, else what failed, else what waits, else the last. */
function defaultStage(stages: StageView[]): string | null {
  for (const state of ['running', 'failed', 'scheduled', 'ready']) {
    const s = stages.find((x) => x.state === state);
    if (s) return s.name;
  }
  return stages.at(-1)?.name ?? null;
}

/** One job: its graph, its stages, the picked stage's attempts and output, and cancel. Live. */
export function JobPage() {
  const { id = '' } = useParams();
  const job = useJob(id);
  const [params, setParams] = useSearchParams();
  if (job.error instanceof ApiError && job.error.status === 404) {
    return (
      <EmptyState title={`No job ${id}.`}>
        It does not exist, was deleted after its retention, or belongs to another team. <Link to="/jobs">All jobs</Link>
      </EmptyState>
    );
  }
  if (job.error) return <ErrorNote error={job.error} retry={() => void job.refetch()} />;
  if (!job.data) return <p className="muted">Loading job {id}…</p>;
  const j = job.data;
  const picked = params.get('stage');
  const selected = j.stages.find((s) => s.name === picked)?.name ?? defaultStage(j.stages);
  const stage = j.stages.find((s) => s.name === selected);
  const select = (name: string) => setParams({ stage: name }, { replace: true });
  return (
    <section className="job">
      <JobHeader job={j} />
      <div className="card">
        <DagView stages={j.stages} selected={selected} onSelect={select} />
      </div>
      <StagesTable stages={j.stages} selected={selected} onSelect={select} />
      {/* Keyed by job too: the panel (an open rerun dialog with it) starts afresh on another job's page. */}
      {stage ? <StagePanel key={`${j.id}/${stage.name}`} job={j} stage={stage} /> : null}
    </section>
  );
}

function JobHeader({ job }: { job: JobView }) {
  const ended = isTerminalJobState(job.state);
  return (
    <div className="page-head job-head">
      <div>
        <p className="crumbs">
          <Link to="/jobs">Jobs</Link> /
        </p>
        <h1>
          {job.name} <StateBadge state={job.state} />
        </h1>
        <p className="job-meta">
          <span className="id" title="job id">
            {job.id}
          </span>
          <span>team {job.team}</span>
          <span>priority {job.priority}</span>
          <span>
            submitted <RelativeTime at={job.createdAt} />
          </span>
          <span>
            {ended ? 'took' : job.state === 'queued' || job.state === 'submitted' ? 'waiting for' : 'running for'}{' '}
            <Elapsed from={job.createdAt} to={ended ? (job.finishedAt ?? job.updatedAt) : null} />
          </span>
          {Object.entries(job.labels).map(([k, v]) => (
            <span key={k} className="label">
              {k}={v}
            </span>
          ))}
        </p>
        <RerunLinks job={job} />
        {job.failureReason ? <p className="reason reason-failed">{job.failureReason}</p> : null}
        {job.cancelRequestedAt && !ended ? (
          <p className="reason">
            Cancel requested <RelativeTime at={job.cancelRequestedAt} />: its processes are being stopped.
          </p>
        ) : null}
      </div>
      <div className="actions">{!ended && !job.cancelRequestedAt ? <CancelButton job={job} /> : null}</div>
    </div>
  );
}

/** The rerun links both ways (docs/rerun.md): the job this one reruns, from which stages; the jobs that rerun this one. */
function RerunLinks({ job }: { job: JobView }) {
  const reruns = job.reruns ?? [];
  if (!job.rerunOf && reruns.length === 0) return null;
  return (
    <p className="job-meta rerun-links">
      {job.rerunOf ? (
        <span data-testid="rerun-of">
          rerun of{' '}
          <Link className="id" to={jobPath(job.rerunOf, job.rerunFrom?.[0])}>
            {job.rerunOf}
          </Link>
          {job.rerunFrom?.length ? ` from ${job.rerunFrom.join(', ')}` : ''}
        </span>
      ) : null}
      {reruns.length ? (
        <span data-testid="rerun-as">
          rerun as{' '}
          {reruns.map((id, i) => (
            <span key={id}>
              {i > 0 ? ', ' : ''}
              <Link className="id" to={jobPath(id)}>
                {id}
              </Link>
            </span>
          ))}
        </span>
      ) : null}
    </p>
  );
}

function CancelButton({ job }: { job: JobView }) {
  const [open, setOpen] = useState(false);
  const cancel = useCancelJob(job.id);
  const running = job.stages.filter((s) => s.state === 'running' || s.state === 'scheduled').length;
  return (
    <>
      <button type="button" className="button button-danger" onClick={() => setOpen(true)}>
        Cancel job
      </button>
      <ConfirmDialog
        open={open}
        title={`Cancel ${job.name}?`}
        confirm="Cancel the job"
        cancel="Keep it"
        busy={cancel.isPending}
        onClose={() => setOpen(false)}
        onConfirm={() => cancel.mutate(undefined, { onSuccess: () => setOpen(false) })}
      >
        <p>
          Nothing more of it will start.{' '}
          {running ? `Its ${running === 1 ? 'running stage is' : `${running} running stages are`} stopped: TERM, a grace period, then KILL.` : ''}
        </p>
        {cancel.error ? <p className="error-note">{cancel.error.message}</p> : null}
      </ConfirmDialog>
    </>
  );
}

function StagesTable({ stages, selected, onSelect }: { stages: StageView[]; selected: string | null; onSelect: (name: string) => void }) {
  return (
    <div className="table-wrap">
      <table className="table stages">
        <TableHead columns={['Stage', 'State', 'Pool', 'Attempt', 'Machine', 'GPUs', 'Progress', 'Ran', 'Why']} />
        <tbody>
          {stages.map((s) => {
            // Its machine, GPUs and time: none while it waits again (requeued after a preemption or a loss).
            const a = placedAttempt(s);
            return (
              <tr key={s.name} className={s.name === selected ? 'current' : undefined} data-stage-row={s.name}>
                <td>
                  <button type="button" className="linklike" onClick={() => onSelect(s.name)} aria-pressed={s.name === selected}>
                    {s.name}
                  </button>
                </td>
                <td>
                  <StateBadge state={s.state} />
                </td>
                <td>
                  <code>{s.pool}</code>
                </td>
                <td>{attemptCountText(s) || '–'}</td>
                <td className="id">{a?.machine ?? '–'}</td>
                <td>{formatGpus(a)}</td>
                <td>{s.state === 'running' ? <ProgressBar progress={a?.progress} /> : <span className="muted">–</span>}</td>
                <td>{a?.startedAt ? <Elapsed from={a.startedAt} to={a.finishedAt} /> : <span className="muted">–</span>}</td>
                <td className="why">
                  {s.reused ? (
                    <>
                      <ReusedBadge /> from{' '}
                      <Link className="id" to={jobPath(s.reused.jobId, s.name)}>
                        {s.reused.jobId}
                      </Link>
                    </>
                  ) : s.state === 'ready' || s.state === 'pending' ? (
                    (s.pendingReason ?? (s.state === 'pending' ? `waits for ${s.needs.join(', ')}` : ''))
                  ) : (
                    (s.endReason ?? '')
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
